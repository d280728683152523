"""Tensors as the kernels take them: a torch tensor on a CUDA device, or an
object with __cuda_array_interface__, checked and described (pointer, shape,
element type, strides) for the launch's arguments."""

import operator

from ._capi import AttncError


def _interface(t, name):
    """(shape, typestr, address, strides in bytes or None) of an object's
    __cuda_array_interface__, each checked for its kind and range."""
    iface = t.__cuda_array_interface__
    what = f"{name}'s __cuda_array_interface__"
    if not isinstance(iface, dict):
        raise AttncError(f"{what} is a {type(iface).__name__}, not a dict")
    missing = [key for key in ("shape", "typestr", "data") if key not in iface]
    if missing:
        raise AttncError(f"{what} has no {', '.join(missing)}")

    def ints(key, value, lo, hi):
        if not isinstance(value, (tuple, list)):
            raise AttncError(f"{what}: {key} = {value!r}, expected a tuple of integers")
        out = []
        for x in value:
            try:
                if isinstance(x, bool):
                    raise TypeError
                x = operator.index(x)
            except TypeError:
                raise AttncError(f"{what}: {key} = {value!r} holds {x!r}, not an integer") from None
            if not lo <= x <= hi:
                raise AttncError(f"{what}: {key} = {value!r} holds {x}, out of {lo} .. {hi}")
            out.append(x)
        return tuple(out)

    shape = ints("shape", iface["shape"], 0, (1 << 62) - 1)
    typestr = iface["typestr"]
    if not isinstance(typestr, str):
        raise AttncError(f"{what}: typestr = {typestr!r}, expected a string such as '<f2'")
    data = iface["data"]
    if not isinstance(data, (tuple, list)) or not data:
        raise AttncError(f"{what}: data = {data!r}, expected (address, read_only)")
    address = ints("data", data[:1], 0, (1 << 64) - 1)[0]
    strides = iface.get("strides")
    if strides is not None:
        strides = ints("strides", strides, -(1 << 62), (1 << 62) - 1)
        if len(strides) != len(shape):
            raise AttncError(f"{what}: strides {strides} for a shape of {len(shape)} dimensions "
                             f"{shape}")
    return shape, typestr, address, strides


_TYPESTR = {"<f2": "f16", "<i4": "i32", "<f4": "f32", "|u1": "u8"}


def _torch():
    try:
        import torch  # noqa: F401
        return torch
    except ImportError:
        return None


class _View:
    """What the launch needs of a tensor: pointer, shape, element type, device."""

    def __init__(self, t, name, strided=False, written=False):
        """strided: any strides in elements (self.strides) whose last is 1, for a paged
        cache's view; otherwise the tensor must be contiguous. written: the kernel
        writes it (out, lse, a workspace), so an array that says it is read-only is
        refused."""
        torch = _torch()
        if torch is not None and isinstance(t, torch.Tensor):
            if not t.is_cuda:
                raise AttncError(f"{name} is on {t.device}, not on a CUDA device")
            if strided:
                self.strides = tuple(t.stride())
            elif not t.is_contiguous():
                raise AttncError(f"{name} is not contiguous (shape {tuple(t.shape)}, strides "
                                 f"{t.stride()}): pass {name}.contiguous()")
            names = {torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32",
                     torch.float32: "f32", torch.uint8: "u8"}
            if t.dtype not in names:
                raise AttncError(f"{name} has dtype {t.dtype}; attnc takes float16 or bfloat16 "
                                 "tensors (int32 for offsets and tables, float32 for lse)")
            self.ptr, self.shape, self.dtype = t.data_ptr(), tuple(t.shape), names[t.dtype]
            self.itemsize, self.device = t.element_size(), t.device.index
            return
        if getattr(t, "__cuda_array_interface__", None) is None:
            raise AttncError(f"{name} is not a CUDA array (a torch CUDA tensor or an object with "
                             "__cuda_array_interface__); host memory cannot be read by the kernel")
        shape, typestr, address, strides = _interface(t, name)
        iface = t.__cuda_array_interface__
        if written and len(iface["data"]) > 1 and iface["data"][1]:
            raise AttncError(f"{name} is read-only (its __cuda_array_interface__ says so), and "
                             "the kernel writes it")
        if iface.get("mask") is not None:
            raise AttncError(f"{name} has a mask in its __cuda_array_interface__: attnc reads "
                             "and writes every element, so masked arrays are not taken")
        if typestr not in _TYPESTR:
            raise AttncError(f"{name} has typestr {typestr!r}; attnc takes '<f2' (float16), "
                             "'<i4' (int32), '<f4' (float32) or '|u1' (bytes, a workspace) "
                             "through __cuda_array_interface__")
        itemsize = int(typestr[2:])
        expect, step = [], itemsize
        for n in reversed(shape):
            expect.insert(0, step)
            step *= n
        if strided:
            given = tuple(strides) if strides is not None else tuple(expect)
            if any(x % itemsize for x in given):
                raise AttncError(f"{name}'s strides {given} are not whole elements of "
                                 f"{itemsize} bytes")
            self.strides = tuple(x // itemsize for x in given)
        elif strides is not None and tuple(strides) != tuple(expect):
            raise AttncError(f"{name} is not contiguous (strides {tuple(strides)}, "
                             f"contiguous would be {tuple(expect)})")
        self.ptr, self.shape, self.dtype = address, shape, _TYPESTR[typestr]
        self.itemsize, self.device = itemsize, None


def _dims(t):
    """The number of dimensions of a tensor or __cuda_array_interface__ object (0 if
    neither: _View names the problem)."""
    try:
        shape = getattr(t, "shape", None)
        if shape is None:
            shape = (getattr(t, "__cuda_array_interface__", None) or {}).get("shape", ())
        return len(tuple(shape))
    except (TypeError, AttributeError):
        return 0


def _cache_strides(kv_, vv):
    """The paged cache's (page, token, head) strides in elements for attnc_args, 0 where a
    dimension of one entry makes the stride meaningless (the runtime's default); k and v
    must agree on the others."""
    def strides(view, name):
        if view.shape[3] > 1 and view.strides[3] != 1:
            raise AttncError(f"{name}'s head_dim is not contiguous (strides {view.strides}): "
                             "each row of a head must be head_dim consecutive elements")
        out = []
        for what, n, stride in zip(("page", "token", "head"), view.shape[:3], view.strides[:3]):
            if n > 1 and stride <= 0:
                raise AttncError(f"{name}'s {what} stride is {stride} (strides {view.strides}): "
                                 f"each {what} must have rows of its own")
            if n > 1 and stride % 8:
                raise AttncError(f"{name}'s {what} stride of {stride} elements is not a multiple "
                                 "of 8: the kernels copy rows in 16-byte pieces")
            out.append(stride if n > 1 else 0)
        return tuple(out)

    k, v = strides(kv_, "k"), strides(vv, "v")
    if k != v:
        raise AttncError(f"k has strides {kv_.strides} but v has {vv.strides}: the two must "
                         "share a layout")
    return k


def _need(view, name, dims=None, dtype=None):
    if dims is not None and len(view.shape) not in (dims if isinstance(dims, tuple) else (dims,)):
        raise AttncError(f"{name} has shape {view.shape}: expected {dims} dimensions")
    if dtype is not None and view.dtype not in (dtype if isinstance(dtype, tuple) else (dtype,)):
        raise AttncError(f"{name} has dtype {view.dtype}, expected {dtype}")
