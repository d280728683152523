#!/usr/bin/env python3
"""Compiles CUDA sources with NVRTC for sm_90a, as the runtime does, and
reports any that do not compile.

  nvrtc_compile.py LIBNVRTC INCLUDE_DIR... -- FILE...

tests/bench/experiments.sh runs it on bench/experiments' variants, so that a
change of the attn/*.cuh templates that breaks them is caught without a GPU.
"""
import ctypes
import sys


def main(argv):
    if "--" not in argv or argv.index("--") < 2:
        sys.stderr.write(__doc__)
        return 2
    sep = argv.index("--")
    lib = ctypes.CDLL(argv[1])
    includes, files = argv[2:sep], argv[sep + 1:]
    opts = [b"--gpu-architecture=sm_90a", b"-std=c++17"] + [("-I" + d).encode() for d in includes]
    failed = 0
    for path in files:
        with open(path, "rb") as f:
            source = f.read()
        prog = ctypes.c_void_p()
        if lib.nvrtcCreateProgram(ctypes.byref(prog), source, path.encode(), 0, None, None) != 0:
            sys.stderr.write("%s: nvrtcCreateProgram failed\n" % path)
            failed += 1
            continue
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        if rc != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            sys.stderr.write("%s does not compile:\n%s\n" % (path, log.value.decode(errors="replace")[-2000:]))
            failed += 1
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if failed:
        sys.stderr.write("%d of %d did not compile\n" % (failed, len(files)))
        return 1
    print("compiled %d with NVRTC" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
