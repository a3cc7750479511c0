"""PCM in every common form, checked and turned into the interleaved int16 the C API takes.

Accepted by :meth:`Stream.feed`:

- numpy arrays of int16, or of float32/float64 in [-1, 1] (clipped, scaled by 32767),
  shaped ``(frames,)`` (interleaved, the stream's channel count) or
  ``(frames, channels)`` with 1 or 2 channels;
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
import sys
from typing import TYPE_CHECKING, Any, NamedTuple, Union

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


def has_numpy() -> bool:
    """True when numpy can be imported."""
    return _np is not None


def require_numpy(what: str) -> Any:
    """The numpy module, or ImportError naming ``what`` as the call that needs it."""
    if _np is None:
        raise ImportError(f"{what} needs numpy, which is not installed (pip install numpy)")
    return _np


class Int16Block(NamedTuple):
    """Samples ready for C: ``pointer`` is valid while ``keep`` is referenced."""

    pointer: Any
    frames: int
    channels: int
    keep: Any


def _check_channels(channels: int) -> int:
    if channels not in (1, 2):
        raise ValueError(f"channels must be 1 or 2, not {channels}")
    return channels


def _split(samples: int, channels: int, what: str) -> int:
    if samples % channels:
        raise ValueError(f"{what}: {samples} samples do not divide into {channels} channels")
    return samples // channels


def _from_numpy(a: "npt.NDArray[Any]", channels: int) -> Int16Block:
    np = require_numpy("feeding a numpy array")
    if a.ndim == 1:
        ch = channels
    elif a.ndim == 2:
        ch = int(a.shape[1])
        if ch not in (1, 2):
            raise ValueError(f"array of shape {a.shape}: the second dimension is the channel count, 1 or 2")
    else:
        raise ValueError(f"array of shape {a.shape}: expected (frames,) or (frames, channels)")
    if a.dtype.kind == "i" and a.dtype.itemsize == 2:
        data = np.ascontiguousarray(a, dtype=np.int16)  # copies only if strided or byte-swapped
    elif a.dtype.kind == "f" and a.dtype.itemsize in (4, 8):
        if not np.isfinite(a).all():
            raise ValueError(f"{a.dtype} array contains NaN or infinity")
        data = np.ascontiguousarray(np.rint(np.clip(a, -1.0, 1.0) * 32767.0).astype(np.int16))
    else:
        raise ValueError(f"array of dtype {a.dtype}: feed int16 samples, or float32/float64 in [-1, 1]")
    frames = _split(int(data.size), ch, f"array of shape {a.shape}")
    return Int16Block(data.ctypes.data_as(_lib.c_int16_p), frames, ch, data)


def _from_buffer(pcm: Any, channels: int) -> Int16Block:
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
            ch = int(shape[1])
            if ch not in (1, 2):
                raise ValueError(f"{what} and shape {view.shape}: the second dimension is the channel count, 1 or 2")
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
    frames = _split(samples, ch, type(pcm).__name__)
    if not view.c_contiguous:
        arr: Any = (ctypes.c_int16 * samples).from_buffer_copy(view.tobytes())
    elif view.readonly:
        arr = (ctypes.c_int16 * samples).from_buffer_copy(view)
    else:
        arr = (ctypes.c_int16 * samples).from_buffer(view)
    return Int16Block(ctypes.cast(arr, _lib.c_int16_p), frames, ch, (arr, view))


def int16_block(pcm: PcmInput, channels: int) -> Int16Block:
    """Checks ``pcm`` and returns its samples as int16 for C (see the module doc).

    ``channels`` is the channel count of 1-D input (interleaved); 2-D input names its own.
    """
    _check_channels(channels)
    if _np is not None and isinstance(pcm, _np.ndarray):
        return _from_numpy(pcm, channels)
    if isinstance(pcm, (str, int, float)):
        raise TypeError(f"cannot feed {type(pcm).__name__}: pass a numpy array, bytes, bytearray, "
                        "memoryview or array('h') of int16 samples")
    return _from_buffer(pcm, channels)


def int16_out(buffer: Any, what: str) -> Int16Block:
    """A writable int16 stereo buffer for the mix: a C-contiguous int16 numpy array of
    shape (frames, 2) or (2 * frames,), a bytearray of 4 * frames bytes, or an
    array('h') / writable int16 memoryview of 2 * frames items."""
    if _np is not None and isinstance(buffer, _np.ndarray):
        if buffer.dtype != _np.int16 or not buffer.flags.c_contiguous or not buffer.flags.writeable:
            raise ValueError(f"{what}: a writable C-contiguous int16 array is needed, not {buffer.dtype}")
        if not ((buffer.ndim == 2 and buffer.shape[1] == 2) or (buffer.ndim == 1 and buffer.size % 2 == 0)):
            raise ValueError(f"{what}: shape {buffer.shape} is not (frames, 2) or (2 * frames,)")
        return Int16Block(buffer.ctypes.data_as(_lib.c_int16_p), int(buffer.size) // 2, 2, buffer)
    view = memoryview(buffer)
    if view.readonly or not view.c_contiguous:
        raise ValueError(f"{what}: {type(buffer).__name__} is not a writable contiguous buffer")
    if view.format not in _INT16_FORMATS | _BYTE_FORMATS:
        raise ValueError(f"{what}: format {view.format!r} is not int16")
    if view.nbytes % 4:
        raise ValueError(f"{what}: {view.nbytes} bytes are not whole stereo int16 frames (4 bytes each)")
    samples = view.nbytes // 2
    arr = (ctypes.c_int16 * samples).from_buffer(view)
    return Int16Block(ctypes.cast(arr, _lib.c_int16_p), samples // 2, 2, (arr, view))


def pcm_view(pointer: Any, frames: int, channels: int) -> "numpy.ndarray[Any, Any]":
    """A read-only numpy view (frames, channels) of int16 samples owned by C."""
    np = require_numpy("a numpy sink")
    view = np.ctypeslib.as_array(pointer, shape=(frames, channels))
    view.flags.writeable = False
    return view  # type: ignore[no-any-return]
