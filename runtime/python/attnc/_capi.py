"""The C API (libattnc.so, compiler/include/attnc/attnc.h) through ctypes:
where the library is found, the functions' signatures, the structs the calls
take, and the errors they report as AttncError."""

import ctypes
import ctypes.util
import os
import threading


class AttncError(RuntimeError):
    """A bad argument, no GPU, a failed compile or launch; the message names it."""


ATTNC_OK = 0
_STATUS = {1: "invalid argument", 2: "no GPU", 3: "compile failed", 4: "launch failed",
           5: "buffer too small", 6: "not in an AOT bundle"}


_BITS = {ctypes.c_uint32: (False, 32), ctypes.c_uint64: (False, 64), ctypes.c_int32: (True, 32),
         ctypes.c_int64: (True, 64)}
# What a launch field holds, in the terms of plan()'s arguments.
_FIELD_FROM = {"batch": "the sequences: cu_seqlens_q's entries - 1",
               "num_q_heads": "q's heads", "num_kv_heads": "k's heads",
               "total_q": "q's tokens", "total_kv": "k's tokens", "num_pages": "k's pages",
               "block_table_stride": "block_table's columns", "max_q_len": "max_seqlen_q",
               "max_kv_len": "max_seqlen_k", "workspace_bytes": "the workspace's bytes"}


class _Args(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32)] + [
        (n, ctypes.c_uint64) for n in ("q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k",
                                       "seq_lens_k", "block_table", "workspace", "workspace_bytes")
    ] + [(n, ctypes.c_int32) for n in ("batch", "num_q_heads", "num_kv_heads", "num_splits")] + [
        (n, ctypes.c_int64) for n in ("total_q", "total_kv", "num_pages", "block_table_stride",
                                      "max_q_len", "max_kv_len")
    ] + [("scale", ctypes.c_double)] + [
        (n, ctypes.c_int64) for n in ("kv_page_stride", "kv_token_stride", "kv_head_stride")]

    def __setattr__(self, name, value):
        # ctypes keeps the low bits of an integer too large for its field: a
        # size or an address that does not fit is refused instead.
        kind = dict(self._fields_).get(name)
        if kind in _BITS and isinstance(value, int):
            signed, bits = _BITS[kind]
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            if not lo <= value <= hi:
                what = f" ({_FIELD_FROM[name]})" if name in _FIELD_FROM else ""
                raise AttncError(f"{name}{what} = {value} does not fit the launch's arguments "
                                 f"(a {'' if signed else 'un'}signed {bits}-bit field: "
                                 f"{lo} .. {hi})")
        super().__setattr__(name, value)


_lib = None
_lib_path = None
_lock = threading.Lock()


def _candidates():
    env = os.environ.get("ATTNC_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libattnc.so")
    root = os.path.abspath(os.path.join(here, "..", "..", ".."))
    for where in ("build/lib", "build-static/lib", "build-static/pack"):  # in this order
        yield os.path.join(root, where, "libattnc.so")
    # Installed: <prefix>/share/attnc/python/attnc next to <prefix>/lib.
    yield os.path.abspath(os.path.join(here, "..", "..", "..", "..", "lib", "libattnc.so"))
    found = ctypes.util.find_library("attnc")
    if found:
        yield found


def _library():
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.path.sep in path and not os.path.exists(path):
                tried.append(f"{path} (no such file)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            if not hasattr(lib, "attnc_abi_version"):
                tried.append(f"{path} (not libattnc)")
                continue
            lib.attnc_abi_version.restype = ctypes.c_int
            if lib.attnc_abi_version() < _ABI_NEEDED:
                raise AttncError(f"{path} has ABI version {lib.attnc_abi_version()}; this module "
                                 f"needs {_ABI_NEEDED} (a libattnc.so from the same build)")
            _declare(lib)
            _lib, _lib_path = lib, path
            return lib
        if os.environ.get("ATTNC_LIBRARY"):
            # The library it names is the one to load: one that cannot be is
            # an error, not a reason to take another build's.
            raise AttncError("ATTNC_LIBRARY names a library that cannot be used: " + tried[0])
        raise AttncError("cannot find libattnc.so (set ATTNC_LIBRARY); tried: " + "; ".join(tried))


def _declare(lib):
    c_char_p, c_void_p, c_size_t = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t
    i64 = ctypes.c_int64
    sig = {
        "attnc_version": (c_char_p, []),
        "attnc_abi_version": (ctypes.c_int, []),
        "attnc_last_error": (c_char_p, []),
        "attnc_spec_canonical": (ctypes.c_int, [c_char_p, c_char_p, c_size_t]),
        "attnc_attention_spec": (ctypes.c_int, [ctypes.POINTER(_Call), c_char_p, c_char_p,
                                                c_size_t]),
        "attnc_runtime_create": (ctypes.c_int, [c_char_p, ctypes.POINTER(c_void_p)]),
        "attnc_runtime_destroy": (None, [c_void_p]),
        "attnc_runtime_arch": (ctypes.c_int, [c_void_p, c_char_p, c_size_t]),
        "attnc_runtime_set_aot_only": (ctypes.c_int, [c_void_p, ctypes.c_int]),
        "attnc_bundle_load": (ctypes.c_int, [c_char_p, ctypes.POINTER(i64)]),
        "attnc_kernel_source": (ctypes.c_int, [c_void_p, c_char_p, c_size_t]),
        "attnc_kernel_get": (ctypes.c_int, [c_void_p, c_char_p, ctypes.POINTER(c_void_p)]),
        "attnc_kernel_release": (None, [c_void_p]),
        "attnc_runtime_prepare": (ctypes.c_int, [c_void_p, ctypes.POINTER(c_char_p), c_size_t,
                                                 ctypes.c_uint, ctypes.POINTER(c_void_p)]),
        "attnc_kernel_spec": (ctypes.c_int, [c_void_p, c_char_p, c_size_t]),
        "attnc_kernel_workspace_bytes": (ctypes.c_int, [c_void_p, ctypes.POINTER(_Args),
                                                        ctypes.POINTER(ctypes.c_uint64)]),
        "attnc_launch": (ctypes.c_int, [c_void_p, ctypes.POINTER(_Args), c_void_p]),
        "attnc_check_arguments": (ctypes.c_int, [c_void_p, ctypes.POINTER(_Args), c_void_p]),
        "attnc_pages_window": (ctypes.c_int, [i64, ctypes.c_uint64, ctypes.POINTER(i64),
                                              ctypes.POINTER(i64)]),
        "attnc_pages_create": (ctypes.c_int, [i64, i64, i64, ctypes.POINTER(c_void_p)]),
        "attnc_pages_destroy": (None, [c_void_p]),
        "attnc_pages_allocate": (ctypes.c_int, [c_void_p, ctypes.c_uint64, i64,
                                                ctypes.POINTER(ctypes.c_int32)]),
        "attnc_pages_release": (ctypes.c_int, [c_void_p, ctypes.c_uint64]),
        "attnc_pages_free_count": (ctypes.c_int, [c_void_p, ctypes.POINTER(i64)]),
        "attnc_pages_windows": (ctypes.c_int, [c_void_p, ctypes.c_uint64, ctypes.POINTER(i64)]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def _check(status, what):
    if status != ATTNC_OK:
        message = _library().attnc_last_error().decode(errors="backslashreplace")
        raise AttncError(f"{what}: {message}" if message else f"{what}: {_STATUS.get(status, status)}")


def _string(fn, *args):
    buf = ctypes.create_string_buffer(4096)
    _check(fn(*args, buf, len(buf)), fn.__name__)
    return buf.value.decode()


class _Call(ctypes.Structure):
    """attnc_call (attnc.h): the tensors' description a spec is derived from."""
    _fields_ = [("size", ctypes.c_uint32), ("dtype", ctypes.c_char_p)] + [
        (n, ctypes.c_int64) for n in ("head_dim", "num_q_heads", "num_kv_heads", "page_size",
                                      "max_q_len")
    ] + [("causal", ctypes.c_int32), ("return_lse", ctypes.c_int32), ("window", ctypes.c_int64),
         ("decode", ctypes.c_int32), ("split_kv", ctypes.c_int32), ("tile_q", ctypes.c_int64),
         ("tile_kv", ctypes.c_int64)]


_ABI_NEEDED = 5  # attnc_bundle_load, attnc_runtime_set_aot_only, attnc_kernel_source


def loaded_path():
    """The path of the library loaded so far, or None."""
    return _lib_path
