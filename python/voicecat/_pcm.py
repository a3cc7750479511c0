"""PCM in every common form, checked and turned into the interleaved int16 or float32
the C API takes.

Accepted by :meth:`Stream.feed`:

- numpy arrays of int16 (fed with ``vc_stream_feed_pcm``), or of float32/float64 in
  [-1, 1] (fed as float32 with ``vc_stream_feed_pcm_f32``, which clips beyond full
  scale; float64 is cast to float32 first), shaped ``(frames,)`` (interleaved, the
  stream's channel count) or ``(frames, channels)`` with 1 or 2 channels;
- ``bytes``, ``bytearray`` and other byte buffers holding native int16 samples (an
  even byte count);
- ``memoryview`` and ``array.array`` of int16 (format ``'h'``), 1-D (interleaved) or
  2-D ``(frames, channels)`` memoryviews.

Anything else raises ``ValueError`` (wrong sample type, shape, byte count) or
``TypeError`` (not audio at all) saying why. numpy is optional: without it, numpy
arrays cannot be passed (there are none) and numpy-only calls raise ImportError.
"""
from __future__ import annotations

import array
import ctypes
import operator
import sys
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union

from . import _lib

if TYPE_CHECKING:
    import numpy
    import numpy.typing as npt

try:
    import numpy as _np
except ImportError:  # numpy is optional
    _np = None  # type: ignore[assignment]

#: What :meth:`Stream.feed` accepts.
PcmInput = Union["npt.NDArray[Any]", bytes, bytearray, memoryview, "array.array[int]"]

_INT16_FORMATS = {"h", "=h", "@h", "<h" if sys.byteorder == "little" else ">h"}
_BYTE_FORMATS = {"B", "b", "c"}
_FLOAT32_FORMATS = {"f", "=f", "@f", "<f" if sys.byteorder == "little" else ">f"}


def has_numpy() -> bool:
    """True when numpy can be imported."""
    return _np is not None


def require_numpy(what: str) -> Any:
    """The numpy module, or ImportError naming ``what`` as the call that needs it."""
    if _np is None:
        raise ImportError(f"{what} needs numpy, which is not installed (pip install numpy)")
    return _np


class PcmBlock(NamedTuple):
    """Samples ready for C: ``pointer`` (int16 or, when ``f32``, float) is valid while
    ``keep`` is referenced."""

    pointer: Any
    frames: int
    channels: int
    keep: Any
    f32: bool = False


def _check_channels(channels: int) -> int:
    try:
        if isinstance(channels, bool):
            raise TypeError
        n = operator.index(channels)   # an int, or an integer numpy scalar
    except TypeError:
        raise TypeError(f"channels must be an int, 1 or 2, not {type(channels).__name__} {channels!r}") from None
    if n not in (1, 2):
        raise ValueError(f"channels must be 1 or 2, not {n}")
    return n


def _split(samples: int, channels: int, what: str) -> int:
    if samples % channels:
        raise ValueError(f"{what}: {samples} samples do not divide into {channels} channels")
    return samples // channels


#: The most sample frames one call can pass to the library (a uint32).
MAX_FRAMES = 0xFFFFFFFF


def _check_size(frames: int, what: str) -> None:
    """Refuses a block the library cannot take, before anything is copied or scanned."""
    if frames > MAX_FRAMES:
        raise ValueError(f"{what}: {frames} frames in one call; at most {MAX_FRAMES} (and what max_queue_ms holds)")


def _shape_channels(shape: Any, channels: int, explicit: bool, what: str) -> int:
    """The channel count of a 2-D block: its second dimension, which an explicit
    ``channels`` argument must not contradict."""
    ch = int(shape[1])
    if ch not in (1, 2):
        raise ValueError(f"{what}: the second dimension is the channel count, 1 or 2")
    if explicit and ch != channels:
        raise ValueError(f"{what} holds {ch} channel(s), but channels={channels} was passed")
    return ch


def _from_numpy(a: "npt.NDArray[Any]", channels: int, explicit: bool) -> PcmBlock:
    np = require_numpy("feeding a numpy array")
    if a.ndim == 1:
        ch = channels
    elif a.ndim == 2:
        ch = _shape_channels(a.shape, channels, explicit, f"array of shape {a.shape}")
    else:
        raise ValueError(f"array of shape {a.shape}: expected (frames,) or (frames, channels)")
    _check_size(int(a.size) // ch, f"array of shape {a.shape}")
    if a.dtype.kind == "i" and a.dtype.itemsize == 2:
        data = np.ascontiguousarray(a, dtype=np.int16)  # copies only if strided or byte-swapped
    elif a.dtype.kind == "f" and a.dtype.itemsize in (4, 8):
        if not np.isfinite(a).all():
            raise ValueError(f"{a.dtype} array contains NaN or infinity")
        data = np.ascontiguousarray(a, dtype=np.float32)  # copies only if float64, strided or byte-swapped
        frames = _split(int(data.size), ch, f"array of shape {a.shape}")
        return PcmBlock(data.ctypes.data_as(_lib.c_float_p), frames, ch, data, True)
    else:
        raise ValueError(f"array of dtype {a.dtype}: feed int16 samples, or float32/float64 in [-1, 1]")
    frames = _split(int(data.size), ch, f"array of shape {a.shape}")
    return PcmBlock(data.ctypes.data_as(_lib.c_int16_p), frames, ch, data)


def _from_buffer(pcm: Any, channels: int, explicit: bool) -> PcmBlock:
    try:
        view = memoryview(pcm)
    except TypeError:
        raise TypeError(f"cannot feed {type(pcm).__name__}: pass a numpy array, bytes, bytearray, "
                        "memoryview or array('h') of int16 samples") from None
    what = f"{type(pcm).__name__} of format {view.format!r}"
    ch = channels
    if view.format in _INT16_FORMATS:
        shape = view.shape or ()
        if len(shape) == 2:
            ch = _shape_channels(shape, channels, explicit, f"{what} and shape {view.shape}")
        elif len(shape) != 1:
            raise ValueError(f"{what} and shape {view.shape}: expected (frames,) or (frames, channels)")
    elif view.format in _BYTE_FORMATS:
        if view.nbytes % 2:
            raise ValueError(f"{type(pcm).__name__} of {view.nbytes} bytes: an odd byte count cannot hold "
                             "int16 samples (2 bytes each)")
    else:
        raise ValueError(f"{what} (item size {view.itemsize}): expected int16 samples (format 'h', item size 2) "
                         "or raw bytes; convert float audio with numpy")
    samples = view.nbytes // 2
    _check_size(samples // ch, type(pcm).__name__)
    frames = _split(samples, ch, type(pcm).__name__)
    if not view.c_contiguous:
        arr: Any = (ctypes.c_int16 * samples).from_buffer_copy(view.tobytes())
    elif view.readonly:
        arr = (ctypes.c_int16 * samples).from_buffer_copy(view)
    else:
        arr = (ctypes.c_int16 * samples).from_buffer(view)
    return PcmBlock(ctypes.cast(arr, _lib.c_int16_p), frames, ch, (arr, view))


def pcm_block(pcm: PcmInput, channels: int, explicit: bool = False) -> PcmBlock:
    """Checks ``pcm`` and returns its samples for C, int16 or float32 (see the module doc).

    ``channels`` is the channel count of 1-D input (interleaved); 2-D input names its
    own, which must be ``channels`` when the caller passed it (``explicit``).
    """
    channels = _check_channels(channels)
    if _np is not None and isinstance(pcm, _np.ndarray):
        return _from_numpy(pcm, channels, explicit)
    if isinstance(pcm, (str, int, float)):
        raise TypeError(f"cannot feed {type(pcm).__name__}: pass a numpy array, bytes, bytearray, "
                        "memoryview or array('h') of int16 samples")
    return _from_buffer(pcm, channels, explicit)


def dtype_name(dtype: Any) -> Optional[str]:
    """The name of a numpy dtype, scalar type or anything numpy.dtype() takes ("float32"),
    or None when it is none of those (or numpy is not installed)."""
    if _np is None:
        return None
    try:
        return str(_np.dtype(dtype).name)
    except (TypeError, ValueError):
        return None


def pcm_out(buffer: Any, channels: int, what: str) -> PcmBlock:
    """A writable buffer for ``channels``-channel output: a C-contiguous int16 or float32
    numpy array of shape (frames, channels) or (channels * frames,); a bytearray (int16)
    of whole frames; or an array('h') / array('f') / writable memoryview of int16 or
    float32 items, ``channels * frames`` of them."""
    if _np is not None and isinstance(buffer, _np.ndarray):
        if buffer.dtype not in (_np.int16, _np.float32):
            raise ValueError(f"{what}: an int16 or float32 array is needed, not {buffer.dtype}")
        if not buffer.flags.c_contiguous:
            raise ValueError(f"{what}: the array must be C-contiguous (this {buffer.dtype} array of shape "
                             f"{buffer.shape} is a strided view or in Fortran order); render into a contiguous "
                             "one (numpy.empty(...)) and copy from it")
        if not buffer.flags.writeable:
            raise ValueError(f"{what}: the array is read-only")
        if not ((buffer.ndim == 2 and buffer.shape[1] == channels) or (buffer.ndim == 1 and buffer.size % channels == 0)):
            raise ValueError(f"{what}: shape {buffer.shape} is not (frames, {channels}) or ({channels} * frames,) "
                             f"for the output format's {channels} channel(s)")
        f32 = buffer.dtype == _np.float32
        pointer = buffer.ctypes.data_as(_lib.c_float_p if f32 else _lib.c_int16_p)
        return PcmBlock(pointer, int(buffer.size) // channels, channels, buffer, bool(f32))
    try:
        view = memoryview(buffer)
    except TypeError:
        raise TypeError(f"{what}: {type(buffer).__name__} is not a buffer (a numpy array, bytearray, array('h') / "
                        "array('f') or memoryview is)") from None
    if view.readonly or not view.c_contiguous:
        raise ValueError(f"{what}: {type(buffer).__name__} is not a writable contiguous buffer")
    ctype: Any
    if view.format in _FLOAT32_FORMATS:
        item, ctype, f32 = 4, ctypes.c_float, True
    elif view.format in _INT16_FORMATS | _BYTE_FORMATS:
        item, ctype, f32 = 2, ctypes.c_int16, False
    else:
        raise ValueError(f"{what}: format {view.format!r} is not int16 or float32")
    if view.nbytes % (item * channels):
        raise ValueError(f"{what}: {view.nbytes} bytes are not whole {'stereo' if channels == 2 else 'mono'} "
                         f"{'float32' if f32 else 'int16'} frames ({item * channels} bytes each)")
    samples = view.nbytes // item
    arr = (ctype * samples).from_buffer(view)
    pointer = ctypes.cast(arr, _lib.c_float_p if f32 else _lib.c_int16_p)
    return PcmBlock(pointer, samples // channels, channels, (arr, view), f32)


def pcm_view(pointer: Any, frames: int, channels: int) -> "numpy.ndarray[Any, Any]":
    """A read-only numpy view (frames, channels) of int16 samples owned by C."""
    np = require_numpy("a numpy sink")
    view = np.ctypeslib.as_array(pointer, shape=(frames, channels))
    view.flags.writeable = False
    return view  # type: ignore[no-any-return]
