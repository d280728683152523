"""attnc from Python: FlashAttention-family kernels generated for a spec.

A thin layer over the C API (libattnc.so, compiler/include/attnc/attnc.h)
through ctypes, so it works on any Python 3 without building an extension.
Tensors are torch tensors on a CUDA device, or for the arguments it does not
allocate, anything with ``__cuda_array_interface__`` (f16, float32 for lse,
and int32 only: that interface has no bfloat16).

    import attnc
    out = attnc.attention(q, k, v, causal=True)            # packed layouts
    out = attnc.scaled_dot_product_attention(q4, k4, v4,   # [B, H, N, d]
                                             is_causal=True, enable_gqa=True)

Layouts (what the kernels read; see templates/attn/params.cuh):
  q, out          [total_q, num_q_heads, head_dim]
  k, v            [total_kv, num_kv_heads, head_dim] with cu_seqlens_k, or
                  [num_pages, page_size, num_kv_heads, head_dim] with
                  block_table [batch, pages_per_seq] and seq_lens_k [batch]
  cu_seqlens_*    int32 [batch + 1] offsets; seq_lens_k int32 [batch]
  lse             float32 [total_q, num_q_heads] (return_lse=True)

The library is found through $ATTNC_LIBRARY, next to this package, in the
source tree's build/lib, build-static/lib or build-static/pack (where
tests/gpu/pack.sh puts it), or on the loader's path.
"""

import ctypes
import math
import numbers
import operator
import os
import threading

from . import _capi
from ._capi import AttncError, _Args, _Call, _check, _library, _string
from ._tensors import _cache_strides, _dims, _interface, _need, _torch, _View

__all__ = ["AttncError", "Runtime", "Kernel", "Plan", "PageAllocator", "attention", "plan",
           "scaled_dot_product_attention", "load_bundle", "set_aot_only",
           "canonical_spec", "spec_for", "version", "library_path"]


def version():
    """'attnc X.Y.Z' of the loaded library."""
    return _library().attnc_version().decode()


def library_path():
    _library()
    return _capi.loaded_path()


def _is_bool(value):
    """A bool, Python's or numpy's (numpy.bool_ converts to an int as well)."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", None) == "b"


def _int(name, value, lo=0, hi=(1 << 62) - 1, hint=""):
    """`value` as an int in lo..hi: an integer (a numpy integer too), not a bool, a
    float or a string, so that nothing is truncated or wraps on its way to C."""
    if _is_bool(value):
        raise AttncError(f"{name} = {value!r}: expected an integer, not a bool{hint}")
    try:
        v = operator.index(value)
    except TypeError:
        raise AttncError(f"{name} = {value!r}: expected an integer{hint}") from None
    if v < lo:
        raise AttncError(f"{name} = {v} must be >= {lo}{hint}")
    if v > hi:
        raise AttncError(f"{name} = {v} must be <= {hi}{hint}")
    return v


def _text(name, value):
    """`value` as bytes for C: a str (without NUL, where C would stop reading)."""
    if not isinstance(value, str):
        raise AttncError(f"{name} = {value!r}: expected a string")
    if "\0" in value:
        raise AttncError(f"{name} = {value!r}: holds a NUL character")
    try:
        return value.encode()
    except UnicodeEncodeError as e:
        raise AttncError(f"{name} = {value!r}: not text UTF-8 can hold ({e.reason})") from None


def _flag(name, value):
    """`value` as a C int for a yes/no argument: a bool (numpy's too) or the
    integer 0 / 1; not a float, a string or None."""
    try:
        if _is_bool(value):
            return int(bool(value))
        v = operator.index(value)
    except (TypeError, ValueError):  # (ValueError: a numpy array of several bools)
        v = None
    if v in (0, 1):
        return v
    raise AttncError(f"{name} = {value!r}: expected True or False")


def _args(value):
    """The launch arguments a Kernel takes: an attnc_args (Plan.args)."""
    if not isinstance(value, _Args):
        raise AttncError(f"args = {value!r}: expected the launch arguments of a Plan (Plan.args)")
    return value


def _stream(value):
    """A CUDA stream as the C API takes it: an int handle (0 .. 2^64 - 1), an
    object with .cuda_stream (a torch.cuda.Stream), or None (the default
    stream, 0); nothing truncated."""
    if value is None:
        return 0
    if hasattr(value, "cuda_stream"):  # torch.cuda.Stream
        value = value.cuda_stream
    try:
        handle = None if _is_bool(value) else operator.index(value)
    except TypeError:
        handle = None
    if handle is None or not 0 <= handle < (1 << 64):
        raise AttncError(f"stream = {value!r}: expected a CUDA stream handle (an int, 0 .. "
                         "2^64 - 1) or an object with .cuda_stream (a torch.cuda.Stream)")
    return handle


def canonical_spec(spec):
    """The canonical form of a spec ('field=value,...'); AttncError names a bad field."""
    lib = _library()
    return _string(lib.attnc_spec_canonical, _text("spec", spec))


def spec_for(dtype, head_dim, num_q_heads, num_kv_heads, *, target, page_size=0, max_q_len=1,
             causal=False, window=None, return_lse=False, decode=None, split_kv=None, tile_q=None,
             tile_kv=None):
    """The canonical spec of the kernel attention() takes for tensors like these on
    `target` ('sm_90a', 'sm_80', or a GPU's architecture such as Runtime().arch:
    sm_9x takes sm_90a, any other from sm_80 takes sm_80), by the C++ library's rules: decode
    kernels, over a paged (page_size > 0) or a contiguous cache, for 1 to 16 query
    tokens (max_q_len) and max_q_len * (num_q_heads / num_kv_heads) <= 128, unless
    `decode` says, tile_q is given (prefill tiles) or tile_kv does not fit the decode
    block (decode=True takes them with tile_q = max_q_len, whatever tile_q says).
    split_kv (an integer) is the decode kernels': a call that takes a prefill kernel
    refuses it, naming why, except an empty step (max_q_len=0, decode and tile_q None),
    which launches nothing and whose prefill spec keeps no count. Needs no GPU: e.g. to list the specs
    a model will need for `attnc aot`."""
    if not isinstance(dtype, str) or dtype not in ("bf16", "f16"):
        raise AttncError(f"dtype {dtype!r}: the kernels take bf16 or f16")
    target_bytes = _text("target", target)
    c = _Call()
    c.size = ctypes.sizeof(_Call)
    c.dtype = dtype.encode()
    c.head_dim = _int("head_dim", head_dim, 1)
    c.num_q_heads = _int("num_q_heads", num_q_heads, 1)
    c.num_kv_heads = _int("num_kv_heads", num_kv_heads, 1)
    c.page_size = _int("page_size", page_size)
    c.max_q_len = _int("max_q_len", max_q_len)
    c.causal, c.return_lse = _flag("causal", causal), _flag("return_lse", return_lse)
    # A spec's numbers stop below 10^9 (a larger window is causal for any sequence).
    c.window = (0 if window is None
                else _int("window", window, 1, 999_999_999, hint=" (None: no window)"))
    c.decode = -1 if decode is None else _flag("decode", decode)
    c.split_kv = (0 if split_kv in (None, "auto")
                  else _int("split_kv", split_kv, 1, (1 << 31) - 1, hint=" or 'auto'"))
    c.tile_q = 0 if tile_q is None else _int("tile_q", tile_q, 1, hint=" (None: the default)")
    c.tile_kv = 0 if tile_kv is None else _int("tile_kv", tile_kv, 1, hint=" (None: the default)")
    lib = _library()
    return _string(lib.attnc_attention_spec, ctypes.byref(c), target_bytes)


def _folder(name, path):
    """A folder's path for C (a str, bytes or os.PathLike, as the file system
    names it); None for None or an empty name (the default folder)."""
    if path is None:
        return None
    try:
        raw = os.fsencode(path)
    except TypeError:
        raise AttncError(f"{name} = {path!r}: expected a folder's path") from None
    if b"\0" in raw:
        raise AttncError(f"{name} = {path!r}: holds a NUL character")
    return raw or None


def load_bundle(path):
    """Registers the kernels of an AOT bundle folder (``attnc aot -o DIR``: its
    manifest.txt and cubins) for every Runtime of the process, attention()'s
    included: a spec the bundle holds for this GPU is then launched with no
    NVRTC compile. Each cubin is checked against the manifest's size and
    checksum and for the kernels its spec names; a bad folder raises AttncError and registers nothing. Loading the
    same folder again registers nothing new (after it was rebuilt: an error,
    the process keeps the kernels it loaded first). Returns the number of
    kernels the folder holds (all architectures). Needs no GPU.

    A call finds a bundled kernel by its spec: a bundle built from specs that
    leave their tiles open holds the built-in tiles. A tuning table on this
    machine (``attnc tune``, $ATTNC_TUNING_FILE) gives calls tuned ones: with
    JIT on they are compiled; in AOT-only mode (set_aot_only) where no bundle
    holds them, the bundle's kernel of the built-in tiles serves the call
    (Kernel.spec says which), as it serves a long head_dim 64 prefill on
    sm_90a, whose 192 x 128 tiles a line that leaves tiles open does not hold. A bundle holds tuned tiles where its spec lines
    give them (``attnc aot`` leaves the table out)."""
    raw = _folder("path", path)
    if raw is None:
        raise AttncError(f"path = {path!r}: expected a folder's path")
    n = ctypes.c_int64()
    _check(_library().attnc_bundle_load(raw, ctypes.byref(n)),
           "loading the bundle " + os.fsdecode(raw))
    return n.value


class _Handle:
    """What owns a C handle (destroyed or released with the object): a copy would
    share the handle and free it twice, so copying and pickling are refused."""

    def _refuse(self, what):
        raise TypeError(f"attnc.{type(self).__name__} cannot be {what}: it owns a handle of "
                        "the C library that its copy would free again; share the object")

    def __copy__(self):
        self._refuse("copied")

    def __deepcopy__(self, memo):
        self._refuse("copied")

    def __reduce__(self):
        self._refuse("pickled")


class Kernel(_Handle):
    """A spec's compiled kernel, loaded in the runtime's CUDA context.
    ``source`` says where it came from when it was got: "bundle" (an AOT
    bundle), "memory", "disk" (the kernel cache) or "compiled" (NVRTC).
    ``spec`` is the kernel's own canonical spec: for a GPU decode spec it may
    differ from the one asked for in tile_q (one decode kernel, whose code is
    the same for every tile_q, serves every query-token count)."""

    def __init__(self, runtime, handle):
        self._runtime, self._handle = runtime, handle
        self.spec = _string(_library().attnc_kernel_spec, handle)
        self.source = _string(_library().attnc_kernel_source, handle)

    def __del__(self):
        lib = getattr(_capi, "_lib", None)  # none loaded (or the interpreter's exit)
        if getattr(self, "_handle", None) and lib is not None:
            lib.attnc_kernel_release(self._handle)
            self._handle = None

    def _is(self, field, value):
        return f"{field}={value}" in self.spec.split(",")

    def workspace_bytes(self, args):
        n = ctypes.c_uint64()
        _check(_library().attnc_kernel_workspace_bytes(self._handle, ctypes.byref(_args(args)),
                                                         ctypes.byref(n)), "workspace size")
        return n.value

    def launch(self, args, stream=0):
        """Enqueues the kernel with `args` (an attnc_args, as Plan.args) on
        `stream` (an int handle or a torch.cuda.Stream)."""
        stream = _stream(stream)
        _check(_library().attnc_launch(self._handle, ctypes.byref(_args(args)),
                                       ctypes.c_void_p(stream)), "launch")

    def check_arguments(self, args, stream=0):
        """The opt-in checking mode: synchronises the stream, reads the offsets,
        lengths and block table back and checks them."""
        stream = _stream(stream)
        _check(_library().attnc_check_arguments(self._handle, ctypes.byref(_args(args)),
                                                ctypes.c_void_p(stream)), "checking the arguments")


class Runtime(_Handle):
    """The JIT runtime bound to the current CUDA context (device 0's primary
    context when none is current): spec -> kernel, cached in memory and on disk
    (cache_dir: a str, bytes or os.PathLike folder; None: the default,
    $ATTNC_CACHE_DIR, else the user's cache folder)."""

    def __init__(self, cache_dir=None, aot_only=False):
        lib = _library()
        aot_only = bool(_flag("aot_only", aot_only))
        handle = ctypes.c_void_p()
        _check(lib.attnc_runtime_create(_folder("cache_dir", cache_dir), ctypes.byref(handle)),
               "attnc runtime")
        self._handle = handle
        self._kernels = {}
        self.arch = _string(lib.attnc_runtime_arch, handle)
        self.aot_only = aot_only

    @property
    def aot_only(self):
        """True: a spec no AOT bundle holds (load_bundle) raises AttncError
        instead of compiling; kernels already got stay usable. A spec on tiles
        attnc would choose for it (a tuning table's, or a long head_dim 64
        prefill's 192 x 128) is served by the kernel of the default tiles where
        that one is held (Kernel.spec says which)."""
        return self._aot_only

    @aot_only.setter
    def aot_only(self, value):
        value = bool(_flag("aot_only", value))
        _check(_library().attnc_runtime_set_aot_only(self._handle, int(value)), "aot_only")
        self._aot_only = value

    def __del__(self):
        lib = getattr(_capi, "_lib", None)  # none loaded (or the interpreter's exit)
        if getattr(self, "_handle", None) and lib is not None:
            self._kernels.clear()
            lib.attnc_runtime_destroy(self._handle)
            self._handle = None

    def prepare(self, specs, threads=0):
        """JIT at model load: the kernels of all specs, the missing ones compiled
        in parallel (threads=0: one per hardware thread). Returns them in order."""
        if isinstance(specs, str):
            raise AttncError(f"specs = {specs!r}: expected a list of specs, not one")
        specs = list(specs)  # an iterator is read once
        threads = _int("threads", threads, 0, (1 << 32) - 1)
        for s in specs:
            _text("spec", s)
        missing = [s for s in dict.fromkeys(specs) if s not in self._kernels]
        if missing:
            names = (ctypes.c_char_p * len(missing))(*[s.encode() for s in missing])
            handles = (ctypes.c_void_p * len(missing))()
            _check(_library().attnc_runtime_prepare(self._handle, names, len(missing),
                                                    threads, handles),
                   "preparing kernels")
            for s, h in zip(missing, handles):
                self._kernels[s] = Kernel(self, ctypes.c_void_p(h))
        return [self._kernels[s] for s in specs]

    def kernel(self, spec):
        """The kernel of a spec (target defaults to this GPU's)."""
        name = _text("spec", spec)
        if spec not in self._kernels:
            handle = ctypes.c_void_p()
            _check(_library().attnc_kernel_get(self._handle, name, ctypes.byref(handle)),
                   "kernel for " + spec)
            self._kernels[spec] = Kernel(self, handle)
        return self._kernels[spec]


def _sequence_id(sequence):
    """A PageAllocator sequence id as the C API's uint64."""
    return _int("sequence", sequence, 0, (1 << 64) - 1)


class PageAllocator(_Handle):
    """Page slots of a paged KV cache ([num_pages, page_size, num_kv_heads, head_dim]) for a
    scheduler to give its sequences, so that each sequence's pages fill windows of 2 MiB of
    the cache (the GPU's large page) instead of lying anywhere in it: the decode kernels
    read pages scattered over the whole cache more slowly (bench/RESULTS.md). A sequence
    takes its next page from the window of its last one while that has room, then moves
    to the window with the most free slots among those no other sequence grows in (any
    window, once none of those has room). Needs no GPU. Its methods may be called from
    several threads: each allocator takes them one at a time.

        pages = attnc.PageAllocator.for_cache(k_cache)     # K and V caches alike
        table[s, :4] = torch.tensor(pages.allocate(s, 4))   # a 64-token prompt, pages of 16
        table[s, 4] = pages.allocate(s)[0]                  # 16 tokens later
        pages.release(s)                                    # the sequence ended
    """

    def __init__(self, num_pages, pages_per_window, first_window_pages=0):
        lib = _library()
        handle = ctypes.c_void_p()
        num_pages = _int("num_pages", num_pages, 1)
        _check(lib.attnc_pages_create(num_pages,
                                      _int("pages_per_window", pages_per_window, 1),
                                      _int("first_window_pages", first_window_pages),
                                      ctypes.byref(handle)), "page allocator")
        self._handle = handle
        self.num_pages = num_pages
        # The C allocator is not thread-safe: one call at a time on each.
        self._calls = threading.Lock()

    @staticmethod
    def window(page_bytes, address=0):
        """(pages per window, first window's pages) of a cache at `address` whose pages
        take `page_bytes` each in the K buffer (the V buffer alike)."""
        per, first = ctypes.c_int64(), ctypes.c_int64()
        _check(_library().attnc_pages_window(_int("page_bytes", page_bytes, 1),
                                             _int("address", address, 0, (1 << 64) - 1),
                                             ctypes.byref(per), ctypes.byref(first)),
               "page window")
        return per.value, first.value

    @classmethod
    def for_cache(cls, cache):
        """An allocator of all pages of `cache`, a [num_pages, page_size, heads, head_dim]
        torch tensor or ``__cuda_array_interface__`` array (K's; a V cache laid out alike
        takes the same slots): contiguous, or any view attnc.plan reads (heads before
        tokens, a pool of pages per head, K and V pages side by side), whose pages lie
        stride(0) apart. Its windows start on the cache's 2 MiB boundaries (each one of the
        GPU's 2 MiB pages when the bytes between pages divide 2 MiB and the cache starts a
        whole number of them before a boundary)."""
        torch = _torch()
        if torch is not None and isinstance(cache, torch.Tensor):
            shape, item, address = tuple(cache.shape), cache.element_size(), cache.data_ptr()
            stride = cache.stride(0) * item if cache.dim() else 0
        elif hasattr(cache, "__cuda_array_interface__"):
            shape, typestr, address, strides = _interface(cache, "cache")
            # '<f2': a byte order, a kind, a size in bytes.
            if not (len(typestr) >= 3 and typestr[0] in "<>|=" and typestr[1].isalpha() and
                    typestr[2:].isdigit() and int(typestr[2:]) > 0):
                raise AttncError(f"cache's __cuda_array_interface__: typestr = {typestr!r}, "
                                 "expected a byte order, a kind and a size such as '<f2'")
            item = int(typestr[2:])
            stride = strides[0] if strides else item * math.prod(shape[1:])
        else:
            raise AttncError(f"cache is a {type(cache).__name__}: expected a torch tensor or an "
                             "array with __cuda_array_interface__")
        if len(shape) != 4:
            raise AttncError(f"cache has shape {shape}: expected [num_pages, page_size, "
                             "num_kv_heads, head_dim]")
        if shape[0] == 1:
            stride = item * math.prod(shape[1:])  # one page: no stride between pages
        if stride <= 0:
            raise AttncError(f"cache's pages lie {stride} bytes apart (shape {shape}): each "
                             "page needs bytes of its own")
        per, first = cls.window(stride, address)
        return cls(shape[0], per, first)

    def __del__(self):
        lib = getattr(_capi, "_lib", None)  # none loaded (or the interpreter's exit)
        if getattr(self, "_handle", None) and lib is not None:
            lib.attnc_pages_destroy(self._handle)
            self._handle = None

    def allocate(self, sequence, count=1):
        """`count` more pages for `sequence` (an int id), as a list of slots: the next
        entries of its block-table row. All or nothing: AttncError when fewer are free."""
        n = _int("count", count)
        seq = _sequence_id(sequence)
        # A count beyond the free slots (so beyond num_pages) is refused by the
        # library before it writes: the buffer need not hold more than the pool.
        out = (ctypes.c_int32 * max(1, min(n, self.num_pages)))()
        with self._calls:
            _check(_library().attnc_pages_allocate(self._handle, seq, n, out),
                   "allocating pages")
        return list(out[:n])

    def release(self, sequence):
        """Every page of `sequence` back to the free slots."""
        seq = _sequence_id(sequence)
        with self._calls:
            _check(_library().attnc_pages_release(self._handle, seq), "releasing pages")

    @property
    def free_pages(self):
        n = ctypes.c_int64()
        with self._calls:
            _check(_library().attnc_pages_free_count(self._handle, ctypes.byref(n)),
                   "free pages")
        return n.value

    def windows(self, sequence):
        """How many 2 MiB windows the pages of `sequence` lie in (0: it holds none)."""
        seq = _sequence_id(sequence)
        n = ctypes.c_int64()
        with self._calls:
            _check(_library().attnc_pages_windows(self._handle, seq, ctypes.byref(n)),
                   "windows")
        return n.value


_runtimes = {}
_aot_only = False
_runtimes_lock = threading.Lock()  # _runtimes and _aot_only change together


def set_aot_only(aot_only=True):
    """AOT-only serving for attention(), plan() and scaled_dot_product_attention():
    a call whose spec no loaded AOT bundle holds (load_bundle) raises AttncError
    instead of compiling a kernel (one on tiles attnc chose, a tuning table's or a
    long head_dim 64 prefill's, is served by a held kernel of the default tiles). Their runtimes, per device, made now or later,
    follow it; a Runtime of your own has its own aot_only."""
    global _aot_only
    value = bool(_flag("aot_only", aot_only))
    with _runtimes_lock:
        _aot_only = value
        for rt in _runtimes.values():
            rt.aot_only = value


def _runtime_for(device):
    key = device if device is not None else -1
    with _runtimes_lock:
        if key not in _runtimes:
            torch = _torch()
            if torch is not None and device is not None:
                with torch.cuda.device(device):
                    torch.cuda.current_stream()  # makes the device's primary context current
                    _runtimes[key] = Runtime(aot_only=_aot_only)
            else:
                _runtimes[key] = Runtime(aot_only=_aot_only)
        return _runtimes[key]


class Plan:
    """One attention call with everything resolved (kernel, arguments, output,
    workspace): run() only enqueues the kernel, for loops where Python's own
    time per call matters (timing, decode steps with fixed buffers)."""

    def __init__(self, kernel, args, out, lse, keep, stream):
        self.kernel, self.args, self.out, self.lse = kernel, args, out, lse
        self._keep, self.stream = keep, stream

    def run(self):
        self.kernel.launch(self.args, self.stream)
        return (self.out, self.lse) if self.lse is not None else self.out


def attention(q, k, v, **kw):
    """Attention over packed (varlen) layouts; returns out, or (out, lse).
    Keyword arguments as for plan()."""
    return plan(q, k, v, **kw).run()


def plan(q, k, v, *, causal=False, window=None, scale=None, cu_seqlens_q=None,
         cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, block_table=None,
         seq_lens_k=None, return_lse=False, out=None, lse=None, workspace=None, decode=None,
         split_kv=None, tile_q=None, tile_kv=None, stream=None, check_arguments=False):
    """Resolves one attention call into a Plan (see attention()).

    causal / window: masks aligned at the bottom right (query i of a sequence
    with q_len queries and kv_len keys sits at key position i + kv_len - q_len);
    window=W keeps the last W keys up to that position. scale multiplies the
    scores before the softmax: None is 1 / sqrt(head_dim), else a finite number
    > 0 (0, which the launch reads as None, is refused). With fewer KV heads
    than query heads (GQA), query head h reads KV head h // (num_q_heads //
    num_kv_heads), as repeat_interleave does. Without cu_seqlens_q
    the whole of q is one sequence (and likewise k). A paged cache (k, v with
    4 dimensions, [num_pages, page_size, num_kv_heads, head_dim]) needs
    block_table, seq_lens_k and max_seqlen_k; it may be any view of that shape
    whose head_dim is contiguous (heads before tokens, a pool of pages per
    head, k and v halves of one tensor), k and v with the same strides. decode=None
    takes the decode kernels (the GQA group's heads in one block, split-KV)
    over a paged or a contiguous cache whose sequences have at most 16 query tokens (and at most
    128 query rows per block: max_seqlen_q x the GQA group), unless tile_q is given (prefill
    tiles) or tile_kv does not fit the decode block; else the prefill kernels (spec_for
    says which a call takes). out, lse and workspace may be given (else they are allocated
    here; a workspace is needed by split-KV decode that merges through global
    memory: Kernel.workspace_bytes, and a given one must hold that many bytes;
    where nothing can allocate it, q not being a torch tensor, a decode launch
    whose split count attnc chooses runs unsplit instead).
    stream: a CUDA stream handle (int) or a torch.cuda.Stream; by default
    torch's current stream on q's device. check_arguments=True runs the
    checking mode (reads the offsets and the block table back) before
    launching. The Plan keeps every tensor given or allocated here alive.
    """
    check_arguments = _flag("check_arguments", check_arguments)
    if lse is not None and not _flag("return_lse", return_lse):
        raise AttncError("lse is given but return_lse is False: nothing would be written to it "
                         "(pass return_lse=True)")
    torch = _torch()
    # What this call allocates (offsets, out, lse, workspace) is allocated with
    # torch on q's device, and the default stream is torch's: for a q that is
    # not a torch tensor (a __cuda_array_interface__ array) they must be given.
    if torch is not None and not isinstance(q, torch.Tensor):
        torch = None
    qv = _View(q, "q")
    _need(qv, "q", 3, ("f16", "bf16"))
    # A paged cache may be any view of its pages whose head_dim is contiguous.
    paged = _dims(k) == 4
    kv_, vv = _View(k, "k", strided=paged), _View(v, "v", strided=paged)
    _need(kv_, "k", (3, 4), qv.dtype)
    _need(vv, "v", len(kv_.shape), qv.dtype)
    if vv.shape != kv_.shape:
        raise AttncError(f"v has shape {vv.shape} but k has {kv_.shape}")
    total_q, hq, d = qv.shape
    hkv, dk = kv_.shape[-2], kv_.shape[-1]
    if dk != d:
        raise AttncError(f"k has head_dim {dk} but q has {d}")
    if hkv < 1 or hq % hkv != 0:
        raise AttncError(f"q has {hq} heads, not a multiple of k's {hkv} heads (GQA)")
    devices = {x.device for x in (qv, kv_, vv) if x.device is not None}
    if len(devices) > 1:
        raise AttncError(f"q, k and v are on different devices: {sorted(devices)}")
    device = devices.pop() if devices else None

    a = _Args()
    a.size = ctypes.sizeof(_Args)
    a.q, a.k, a.v = qv.ptr, kv_.ptr, vv.ptr
    a.num_q_heads, a.num_kv_heads, a.total_q = hq, hkv, total_q
    # Every tensor the launch reads or writes, the caller's and those allocated
    # here: a Plan keeps them alive for as long as it may launch on their addresses.
    keep = [q, k, v]

    def on_device(view, name):
        if device is not None and view.device is not None and view.device != device:
            raise AttncError(f"{name} is on cuda:{view.device}, but q, k and v on cuda:{device}")
        return view

    def index_array(t, name, n=None):
        view = on_device(_View(t, name), name)
        _need(view, name, 1 if name != "block_table" else 2, "i32")
        keep.append(t)
        if n is not None and view.shape[0] != n:
            raise AttncError(f"{name} has {view.shape[0]} entries, expected {n}")
        return view

    def device_ints(values):
        if torch is None:
            raise AttncError("cu_seqlens must be given as CUDA int32 arrays without torch "
                             "(or with a q that is not a torch tensor)")
        return torch.tensor(values, dtype=torch.int32, device=q.device)

    def one_sequence_max(given, length, name, tensor):
        """max_seqlen_* when this call builds the offsets of the one sequence itself."""
        if given is None:
            return length
        if _int(name, given) < length:
            raise AttncError(f"{name} = {given}, but {tensor} holds one sequence of {length} "
                             f"tokens (no cu_seqlens_{name[-1]} given)")
        return given

    if cu_seqlens_q is None:
        max_seqlen_q = one_sequence_max(max_seqlen_q, total_q, "max_seqlen_q", "q")
        cu_seqlens_q = device_ints([0, total_q])
    cq = index_array(cu_seqlens_q, "cu_seqlens_q")
    if cq.shape[0] < 2:
        raise AttncError(f"cu_seqlens_q has {cq.shape[0]} entries: at least 2 (0, then each "
                         "sequence's end)")
    a.cu_seqlens_q, a.batch = cq.ptr, cq.shape[0] - 1
    if max_seqlen_q is None:
        raise AttncError("max_seqlen_q is needed with cu_seqlens_q (the longest sequence's length)")
    a.max_q_len = _int("max_seqlen_q", max_seqlen_q)
    if paged:
        if block_table is None or seq_lens_k is None:
            raise AttncError("a paged k/v (4 dimensions) needs block_table and seq_lens_k")
        bt = index_array(block_table, "block_table")
        sl = index_array(seq_lens_k, "seq_lens_k", a.batch)
        if bt.shape[0] != a.batch:
            raise AttncError(f"block_table has {bt.shape[0]} rows, expected batch = {a.batch}")
        a.block_table, a.seq_lens_k = bt.ptr, sl.ptr
        a.block_table_stride, a.num_pages = bt.shape[1], kv_.shape[0]
        page_size = kv_.shape[1]
        a.kv_page_stride, a.kv_token_stride, a.kv_head_stride = _cache_strides(kv_, vv)
        if max_seqlen_k is None:
            raise AttncError("max_seqlen_k is needed with a paged cache")
    else:
        if cu_seqlens_k is None:
            if a.batch != 1:
                raise AttncError("cu_seqlens_k is needed when cu_seqlens_q has several sequences")
            max_seqlen_k = one_sequence_max(max_seqlen_k, kv_.shape[0], "max_seqlen_k", "k")
            cu_seqlens_k = device_ints([0, kv_.shape[0]])
        ck = index_array(cu_seqlens_k, "cu_seqlens_k", a.batch + 1)
        a.cu_seqlens_k, a.total_kv = ck.ptr, kv_.shape[0]
        if max_seqlen_k is None:
            raise AttncError("max_seqlen_k is needed with cu_seqlens_k")
        page_size = 0
    a.max_kv_len = _int("max_seqlen_k", max_seqlen_k)
    if scale is not None and (isinstance(scale, (str, bytes, bool)) or
                              not isinstance(scale, numbers.Real)):
        raise AttncError(f"scale = {scale!r}: expected a number")
    try:
        a.scale = 0.0 if scale is None else float(scale)
    except OverflowError:
        raise AttncError(f"scale = {scale} does not fit in a double") from None
    if scale is not None and not (math.isfinite(a.scale) and a.scale > 0):
        raise AttncError(f"scale = {scale} must be finite and > 0"
                         + (" (scale=None: 1 / sqrt(head_dim))" if a.scale == 0 else ""))

    rt = _runtime_for(device)
    kernel = rt.kernel(spec_for(qv.dtype, d, hq, hkv, target=rt.arch, page_size=page_size,
                                max_q_len=a.max_q_len, causal=causal, window=window,
                                return_lse=return_lse, decode=decode, split_kv=split_kv,
                                tile_q=tile_q, tile_kv=tile_kv))

    def alloc(shape, dtype_name, name):
        if torch is None:
            raise AttncError(f"{name} must be given (allocating it needs torch, and a q that "
                             "is a torch tensor)")
        dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
              "u8": torch.uint8}[dtype_name]
        return torch.empty(shape, dtype=dt, device=q.device)  # kept below, as a given one

    if out is None:
        out = alloc((total_q, hq, d), qv.dtype, "out")
    ov = on_device(_View(out, "out", written=True), "out")
    _need(ov, "out", 3, qv.dtype)
    keep.append(out)
    if ov.shape != qv.shape:
        raise AttncError(f"out has shape {ov.shape}, q has {qv.shape}")
    a.o = ov.ptr
    if return_lse:
        if lse is None:
            lse = alloc((total_q, hq), "f32", "lse")
        lv = on_device(_View(lse, "lse", written=True), "lse")
        _need(lv, "lse", 2, "f32")
        keep.append(lse)
        if lv.shape != (total_q, hq):
            raise AttncError(f"lse has shape {lv.shape}, expected {(total_q, hq)}")
        a.lse = lv.ptr
    need = kernel.workspace_bytes(a)
    if need and workspace is None and torch is None and split_kv in (None, "auto"):
        # Nothing to allocate it with: the splits that need none (one), as
        # attn::attention does without a workspace.
        a.num_splits = 1
        need = kernel.workspace_bytes(a)
    if need:
        if workspace is None:
            workspace = alloc((need,), "u8", "workspace")
        wv = on_device(_View(workspace, "workspace", written=True), "workspace")
        given = math.prod(wv.shape) * wv.itemsize
        if given < need:
            raise AttncError(f"workspace holds {given} bytes; this call needs {need} "
                             "(Kernel.workspace_bytes)")
        a.workspace, a.workspace_bytes = wv.ptr, given
        keep.append(workspace)
    if stream is None:
        stream = torch.cuda.current_stream(q.device).cuda_stream if torch is not None else 0
    stream = _stream(stream)
    if check_arguments:
        kernel.check_arguments(a, stream)
    return Plan(kernel, a, out, lse if return_lse else None, keep, stream)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention on [B, H, N, d] torch
    tensors (f16/bf16, no attn_mask, no dropout), computed by attnc."""
    torch = _torch()
    if torch is None:
        raise AttncError("scaled_dot_product_attention takes torch tensors: torch is not installed")
    if attn_mask is not None:
        raise AttncError("attn_mask is not supported: attnc's masks are causal and sliding windows")
    if dropout_p:
        raise AttncError("dropout_p must be 0: attnc kernels are for inference")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise AttncError("query, key and value must be [batch, heads, seq, head_dim]")
    b, hq, nq, d = query.shape
    hkv, nk = key.shape[1], key.shape[2]
    if hkv != hq and not enable_gqa:
        raise AttncError(f"query has {hq} heads and key {hkv}: pass enable_gqa=True for GQA")
    if is_causal and nq != nk:
        raise AttncError("is_causal with different query and key lengths: torch aligns the mask "
                         "at the top left, attnc at the bottom right; use attnc.attention")
    q = query.transpose(1, 2).reshape(b * nq, hq, d).contiguous()
    k = key.transpose(1, 2).reshape(b * nk, hkv, d).contiguous()
    v = value.transpose(1, 2).reshape(b * nk, hkv, d).contiguous()
    cq = torch.arange(0, (b + 1) * nq, nq, dtype=torch.int32, device=query.device)
    ck = torch.arange(0, (b + 1) * nk, nk, dtype=torch.int32, device=query.device)
    out = attention(q, k, v, causal=is_causal, scale=scale, cu_seqlens_q=cq, cu_seqlens_k=ck,
                    max_seqlen_q=nq, max_seqlen_k=nk)
    return out.reshape(b, nq, hq, d).transpose(1, 2)
