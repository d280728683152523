# lit configuration for the attn IR tests: one file per pass, plus the
# verifier and the CLI tests. Tools come from the build's bin/ folder.
import os

import lit.formats

config.name = "ATTN"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(getattr(config, "attn_obj_root", "/tmp/attn-lit"), "tests", "lit")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]

tools = getattr(config, "attn_tools_dir", None) or lit_config.params["attn_tools_dir"]
llvm = getattr(config, "llvm_tools_dir", None) or lit_config.params.get(
    "llvm_tools_dir", "/usr/lib/llvm-22/bin")
config.environment["PATH"] = os.pathsep.join([tools, llvm, config.environment.get("PATH", "")])
# No tuning table of this machine's (a test that wants one names it).
config.environment["ATTNC_TUNING_FILE"] = os.path.join(config.test_exec_root, "no-tuning.txt")

# A Python with numpy (Debian's python3-numpy) for the .npy round trips.
import shutil
import subprocess

def _has_numpy(python):
    try:
        return subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode == 0
    except OSError:
        return False

_python = next((p for p in ["/usr/bin/python3", shutil.which("python3") or ""] if p and _has_numpy(p)), None)
if _python:
    config.substitutions.append(("%python", _python))
    config.available_features.add("numpy")

if getattr(config, "attnc_have_nvrtc", "OFF") == "ON":
    config.available_features.add("nvrtc")
