"""The GPU's busy share over a time window, read from NVML through ctypes (no nvidia-smi subprocess, no
Python dependency).

NVML keeps a ring of utilisation samples per GPU (``nvmlDeviceGetSamples``, GPU utilisation: the share of each
sampling period in which a kernel ran), each stamped in microseconds of the host's wall clock. A burst's busy
share is the mean of the samples stamped inside it, read once the burst is over: nothing runs while requests are
in flight. Where the ring holds no sample inside a short window, the sample that covers its end is used.
Inactive (every figure None) where there is no NVIDIA driver.
"""

from __future__ import annotations

import ctypes
import logging
import time

log = logging.getLogger(__name__)

_GPU_UTILIZATION_SAMPLES = 1  # nvmlSamplingType_t NVML_GPU_UTILIZATION_SAMPLES
_SUCCESS = 0
_NOT_FOUND = 6  # NVML_ERROR_NOT_FOUND: no sample newer than the timestamp given


class _Value(ctypes.Union):
    _fields_ = [  # noqa: RUF012 (ctypes' own declaration)
        ("dVal", ctypes.c_double),
        ("uiVal", ctypes.c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", ctypes.c_ulonglong),
        ("sllVal", ctypes.c_longlong),
    ]


class _Sample(ctypes.Structure):
    _fields_ = [("timeStamp", ctypes.c_ulonglong), ("sampleValue", _Value)]  # noqa: RUF012


_VALUE_READERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}  # nvmlValueType_t


class GpuBusy:
    """Busy share of one GPU (NVML index) per window. ``share(t0, t1)`` with ``time.time()`` stamps returns the
    mean utilisation in percent of the samples inside the window, or None where NVML is absent or has none."""

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self._lib: ctypes.CDLL | None = None
        self._handle = ctypes.c_void_p()
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != _SUCCESS:
                return
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(self._handle)) != _SUCCESS:
                return
            self._lib = lib
        except OSError:
            return

    @property
    def active(self) -> bool:
        return self._lib is not None

    def samples(self, since_s: float) -> list[tuple[float, float]]:
        """(time.time() stamp, busy %) of the samples NVML holds newer than ``since_s``."""
        if self._lib is None:
            return []
        last = ctypes.c_ulonglong(max(0, int(since_s * 1e6)))
        vtype = ctypes.c_int()
        count = ctypes.c_uint(0)
        get = self._lib.nvmlDeviceGetSamples
        rc = get(self._handle, _GPU_UTILIZATION_SAMPLES, last, ctypes.byref(vtype), ctypes.byref(count), None)
        if rc == _NOT_FOUND or count.value == 0:
            return []
        if rc != _SUCCESS:
            return []
        buf = (_Sample * count.value)()
        rc = get(self._handle, _GPU_UTILIZATION_SAMPLES, last, ctypes.byref(vtype), ctypes.byref(count), buf)
        if rc != _SUCCESS:
            return []
        field = _VALUE_READERS.get(vtype.value, "uiVal")
        return [(s.timeStamp / 1e6, float(getattr(s.sampleValue, field))) for s in buf[: count.value]]

    def share(self, t0: float, t1: float) -> float | None:
        """Mean busy % of the samples stamped in [t0, t1]; the first sample after ``t1`` where none is inside
        (its period covers the window's end); None without samples."""
        got = self.samples(t0 - 2.0)
        inside = [v for t, v in got if t0 <= t <= t1]
        if inside:
            return round(sum(inside) / len(inside), 1)
        after = sorted((t, v) for t, v in got if t > t1)
        return after[0][1] if after else None


def gpu_busy_for(device: str) -> GpuBusy | None:
    """A busy-share reader for a lease's device ("0", "1", ...; "cpu" or anything else: none)."""
    if not device.isdigit():
        return None
    busy = GpuBusy(int(device))
    if not busy.active:
        return None
    busy.samples(time.time())  # the first call starts NVML's bookkeeping for this process
    return busy
