"""The GGUF container: its header, metadata and tensor table, validated before any use.

A GGUF file (llama.cpp's format, version 2 or 3, little-endian) is a header, ``kv_count``
typed metadata entries, ``tensor_count`` tensor descriptions (name, dimensions, ggml type,
offset) and the aligned tensor data. :func:`open_gguf` reads the header and tables through
a read-only memory map, checking every count and length against the file's size as it
goes, so a truncated file, a declared string or array longer than the file, or a tensor
whose data would run past the end is one :class:`~brwsim.errors.UserError` line before
anything of that size is allocated. Tensor data stays in the map until
:meth:`GGUFFile.dequantized` widens one tensor to float32 with the ``gguf`` package's own
:func:`gguf.quants.dequantize`, so values are bit for bit those of the reference reader.

The type codes, block sizes and value types come from the ``gguf`` package
(:data:`gguf.GGML_QUANT_SIZES`, :class:`gguf.GGMLQuantizationType`,
:class:`gguf.GGUFValueType`); the tables are walked here rather than by
:class:`gguf.GGUFReader`, which builds one numpy view per array item (seconds for a
262,144-token vocabulary) and reports a short tensor only as a failed reshape.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any, NamedTuple

import numpy as np

from brwsim.errors import UserError

__all__ = ["GGUFFile", "TensorInfo", "open_gguf", "SUPPORTED_TYPES"]

#: ggml tensor types brwsim dequantises (each through :func:`gguf.quants.dequantize`).
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                   "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

_MAGIC = b"GGUF"
# Scalar value types: code -> struct format (little-endian).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
          10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4


class TensorInfo(NamedTuple):
    """One tensor of the table: ``shape`` in numpy order (ggml's dimensions reversed)."""

    name: str
    shape: tuple[int, ...]
    type_name: str
    type_code: int
    offset: int          # absolute byte offset of the data in the file
    nbytes: int


class _Cursor:
    """Sequential little-endian reads from the map, each checked against its end."""

    def __init__(self, buf: mmap.mmap | bytes, path: str) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path
        self.size = len(buf)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise UserError(f"{self.path}: truncated GGUF file ({what} at byte {self.pos} "
                            f"needs {n} bytes, the file has {self.size})")

    def scalar(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.scalar("<Q", what)
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{self.path}: {what} is not UTF-8") from None


def _value(c: _Cursor, vtype: int, key: str) -> Any:
    """One metadata value; numeric arrays become numpy arrays, string arrays lists."""
    if vtype in _SCALARS:
        return c.scalar(_SCALARS[vtype], f"metadata {key!r}")
    if vtype == _STRING:
        return c.string(f"metadata {key!r}")
    if vtype != _ARRAY:
        raise UserError(f"{c.path}: metadata {key!r} has unknown value type {vtype}")
    itype = c.scalar("<I", f"metadata {key!r}")
    count = c.scalar("<Q", f"metadata {key!r}")
    if itype in _NUMPY:
        width = np.dtype(_NUMPY[itype]).itemsize
        c.need(count * width, f"metadata array {key!r} of {count} items")
        a = np.frombuffer(c.buf, dtype=_NUMPY[itype], count=count, offset=c.pos).copy()
        c.pos += count * width
        return a.astype(bool) if itype == 7 else a
    if itype == _STRING:
        # Each string takes at least its 8-byte length: refuse a count the file cannot hold.
        c.need(count * 8, f"metadata array {key!r} of {count} strings")
        return [c.string(f"metadata {key!r}[{i}]") for i in range(count)]
    raise UserError(f"{c.path}: metadata {key!r} is an array of unsupported type {itype}")


class GGUFFile:
    """A validated GGUF file: ``metadata`` (key -> value) and ``tensors`` (name -> info).

    Use :func:`open_gguf`. The file stays memory-mapped read-only while the object lives.
    """

    def __init__(self, path: str, version: int, metadata: dict[str, Any],
                 tensors: dict[str, TensorInfo], buf: mmap.mmap) -> None:
        self.path = path
        self.version = version
        self.metadata = metadata
        self.tensors = tensors
        self._buf = buf

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes (or values, for F32/F16) of tensor ``name``, as
        :class:`gguf.GGUFReader` shapes them: a view of the map, not a copy."""
        import gguf
        from gguf.quants import quant_shape_to_byte_shape

        t = self.tensors[name]
        qtype = gguf.GGMLQuantizationType(t.type_code)
        if t.type_name in ("F32", "F16"):
            dtype = np.float32 if t.type_name == "F32" else np.float16
            return np.frombuffer(self._buf, dtype=dtype, count=t.nbytes // np.dtype(dtype).itemsize,
                                 offset=t.offset).reshape(t.shape)
        shape = quant_shape_to_byte_shape(t.shape, qtype)
        return np.frombuffer(self._buf, dtype=np.uint8, count=t.nbytes,
                             offset=t.offset).reshape(shape)

    def dequantized(self, name: str) -> np.ndarray:
        """Tensor ``name`` widened to float32 (numpy order), by :func:`gguf.quants.dequantize`."""
        import gguf
        from gguf.quants import dequantize

        t = self.tensors[name]
        out = np.asarray(dequantize(self.raw(name), gguf.GGMLQuantizationType(t.type_code)),
                         dtype=np.float32).reshape(t.shape)
        # F32 comes back as a view of the read-only map: the caller gets its own copy.
        return out if out.flags.writeable else out.copy()

    def get(self, key: str, default: Any = None) -> Any:
        """Metadata value of ``key`` (``default`` if absent)."""
        return self.metadata.get(key, default)


def open_gguf(path: str) -> GGUFFile:
    """Map and validate the GGUF file at ``path``.

    Raises
    ------
    UserError
        The file is missing, not GGUF, of an unsupported version or byte order, truncated,
        declares a tensor of an unsupported type, of more than 4 dimensions or whose data
        would end past the end of the file, or repeats a key or tensor name.
    """
    import gguf

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UserError(f"GGUF file {path!r} not found")
    size = os.path.getsize(path)
    if size < 24:
        raise UserError(f"{path}: truncated GGUF file ({size} bytes, a header needs 24)")
    with open(path, "rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    c = _Cursor(buf, path)
    if bytes(buf[:4]) != _MAGIC:
        raise UserError(f"{path}: not a GGUF file (no GGUF magic)")
    c.pos = 4
    version = c.scalar("<I", "version")
    if version not in (2, 3):
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        hint = " (a big-endian file?)" if swapped in (2, 3) else ""
        raise UserError(f"{path}: GGUF version {version} is not supported (2 or 3){hint}")
    n_tensors = c.scalar("<Q", "tensor count")
    n_kv = c.scalar("<Q", "metadata count")
    # Every entry takes at least 12 bytes (key length + type), every tensor at least 24.
    c.need(n_kv * 12 + n_tensors * 24, f"{n_kv} metadata entries and {n_tensors} tensors")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = c.string("metadata key")
        vtype = c.scalar("<I", f"metadata {key!r}")
        if key in metadata:
            raise UserError(f"{path}: metadata key {key!r} appears twice")
        metadata[key] = _value(c, vtype, key)
    align = metadata.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise UserError(f"{path}: general.alignment {align!r} is not a power of two")
    infos = []
    for _ in range(n_tensors):
        name = c.string("tensor name")
        nd = c.scalar("<I", f"tensor {name!r}")
        if not 1 <= nd <= _MAX_DIMS:
            raise UserError(f"{path}: tensor {name!r} has {nd} dimensions (1 to {_MAX_DIMS})")
        dims = [c.scalar("<Q", f"tensor {name!r}") for _ in range(nd)]
        code = c.scalar("<I", f"tensor {name!r}")
        off = c.scalar("<Q", f"tensor {name!r}")
        infos.append((name, dims, code, off))
    data_start = -(-c.pos // align) * align
    tensors: dict[str, TensorInfo] = {}
    for name, dims, code, off in infos:
        try:
            qtype = gguf.GGMLQuantizationType(code)
        except ValueError:
            raise UserError(f"{path}: tensor {name!r} has unknown ggml type {code}") from None
        if qtype.name not in SUPPORTED_TYPES:
            raise UserError(f"{path}: tensor {name!r} is of type {qtype.name}, not supported "
                            f"({', '.join(SUPPORTED_TYPES)})")
        block, tsize = gguf.GGML_QUANT_SIZES[qtype]
        if any(d <= 0 for d in dims) or dims[0] % block:
            raise UserError(f"{path}: tensor {name!r} has dimensions {dims} (rows of "
                            f"{qtype.name} are whole blocks of {block})")
        n = 1
        for d in dims:
            n *= d
        nbytes = n // block * tsize
        start = data_start + off
        if off % align or start + nbytes > size:
            raise UserError(f"{path}: tensor {name!r} ({qtype.name}, {nbytes} bytes at offset "
                            f"{start}) exceeds the file's {size} bytes (truncated or corrupt)"
                            if start + nbytes > size else
                            f"{path}: tensor {name!r} offset {off} is not {align}-aligned")
        if name in tensors:
            raise UserError(f"{path}: tensor {name!r} appears twice")
        tensors[name] = TensorInfo(name, tuple(reversed(dims)), qtype.name, code, start, nbytes)
    return GGUFFile(path, version, metadata, tensors, buf)
