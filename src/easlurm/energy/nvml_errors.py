"""What an NVML error means for a sensor, in one table, so every NVML caller translates errors the same way."""

from __future__ import annotations

#: NVML return codes (as in pynvml) and what they mean for a sensor: "gone" degrades it for good,
#: "transient" skips one sample, "unsupported" makes the sensor try the next method.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
#: no sample or process in the window asked for (not an error of the GPU)
NVML_ERROR_NOT_FOUND = 6
_ERROR_CLASS = {
    1: "gone",  # UNINITIALIZED
    2: "unsupported",  # INVALID_ARGUMENT
    3: "unsupported",  # NOT_SUPPORTED
    4: "gone",  # NO_PERMISSION
    9: "gone",  # DRIVER_NOT_LOADED
    10: "transient",  # TIMEOUT
    12: "gone",  # LIBRARY_NOT_FOUND
    13: "unsupported",  # FUNCTION_NOT_FOUND
    15: "gone",  # GPU_IS_LOST
    16: "gone",  # RESET_REQUIRED
    19: "transient",  # IN_USE
    21: "transient",  # NO_DATA
    27: "transient",  # NOT_READY
    999: "transient",  # UNKNOWN
}


def nvml_error_class(exc: BaseException) -> str:
    """'gone', 'transient' or 'unsupported' for an NVMLError (unknown codes count as gone)."""
    return _ERROR_CLASS.get(getattr(exc, "value", -1), "gone")
