"""Device memory whose address survives releasing it: CUDA virtual memory management through the driver API.

A decode CUDA graph bakes in the KV cache's address. With free_cache_engine the cache is freed after every
generation so the trainer can use the memory; allocated again through PyTorch it lands elsewhere, and every
generation had to capture its graphs again (~15-30 ms per batch size on an H200; a rollout whose sequences
stop at different lengths passes through one size per 16 rows). A `StableBuffer` reserves a virtual
address range once and maps physical memory into it only while it is `map`ped: `unmap` hands the memory
back to the driver (the trainer's allocator can take it), `map` puts fresh memory at the same address, and
the captured graphs stay valid.

Driver calls go through ctypes on libcuda (no compiled extension, no cuda-python). The memory is outside
PyTorch's caching allocator, so `hybridrl.utils.memory` adds the bytes mapped here to its peaks.
"""

from __future__ import annotations

import ctypes
import functools
import weakref

import torch

from hybridrl.utils import memory

_PINNED, _ON_DEVICE, _READ_WRITE, _RECOMMENDED = 1, 1, 3, 1  # CUmemAllocationType, ...LocationType, ...Access_flags
_OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp; zero-filled tail for fields added later
    _fields_ = [("type", ctypes.c_int), ("requested_handle_types", ctypes.c_int), ("location", _Location),
                ("win32_metadata", ctypes.c_void_p), ("alloc_flags", ctypes.c_ubyte * 8),
                ("reserved", ctypes.c_ubyte * 48)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class DriverError(RuntimeError):
    """A CUDA driver call failed; `code` is its CUresult."""

    def __init__(self, call: str, code: int, text: str) -> None:
        super().__init__(f"{call} failed: CUDA error {code} ({text})")
        self.code = code


@functools.lru_cache(maxsize=None)
def _libcuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    u64, size = ctypes.c_uint64, ctypes.c_size_t
    signatures = {
        "cuMemGetAllocationGranularity": [ctypes.POINTER(size), ctypes.POINTER(_AllocationProp), ctypes.c_int],
        "cuMemAddressReserve": [ctypes.POINTER(u64), size, size, u64, u64],
        "cuMemAddressFree": [u64, size],
        "cuMemCreate": [ctypes.POINTER(u64), size, ctypes.POINTER(_AllocationProp), u64],
        "cuMemRelease": [u64],
        "cuMemMap": [u64, size, size, u64, u64],
        "cuMemUnmap": [u64, size],
        "cuMemSetAccess": [u64, size, ctypes.POINTER(_AccessDesc), size],
        "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return lib


def _check(call: str, code: int) -> None:
    if code:
        text = ctypes.c_char_p()
        _libcuda().cuGetErrorString(code, ctypes.byref(text))
        raise DriverError(call, code, (text.value or b"unknown").decode())


def _device_prop(device_index: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type, prop.location = _PINNED, _Location(_ON_DEVICE, device_index)
    return prop


@functools.lru_cache(maxsize=None)
def unavailable_reason(device_index: int) -> str | None:
    """None when this process can reserve, map and unmap device memory on `device_index`; else why not."""
    try:
        buffer = StableBuffer(torch.device("cuda", device_index), 1)
        buffer.map()
        buffer.close()
    except (OSError, AttributeError, DriverError) as err:  # no libcuda / too old a driver / refused (e.g. vGPU)
        return f"{type(err).__name__}: {err}"
    return None


class StableBuffer:
    """`capacity` bytes of address space on one CUDA device, backed by physical memory only while mapped.

    `tensor()` views the whole range (uint8); views stay valid across `unmap`/`map` but must not be touched
    while unmapped (the device would fault). `close()` (or garbage collection) frees everything.
    """

    def __init__(self, device: torch.device, capacity: int) -> None:
        self.device = device
        lib, prop = _libcuda(), _device_prop(device.index)
        granularity = ctypes.c_size_t()
        _check("cuMemGetAllocationGranularity",
               lib.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop), _RECOMMENDED))
        self.capacity = -(-max(capacity, 1) // granularity.value) * granularity.value
        address = ctypes.c_uint64()
        _check("cuMemAddressReserve", lib.cuMemAddressReserve(ctypes.byref(address), self.capacity, 0, 0, 0))
        self.address = address.value
        self._state = {"handle": None}  # shared with the finalizer
        self._finalizer = weakref.finalize(self, _free, self.address, self.capacity, device, self._state)
        self._finalizer.atexit = False  # at exit the driver frees the context's memory itself

    @property
    def mapped(self) -> bool:
        return self._state["handle"] is not None

    def map(self) -> None:
        """Back the whole range with fresh (uninitialised) device memory. Raises torch.OutOfMemoryError when
        the device has not that much free."""
        if self.mapped:
            return
        lib, handle = _libcuda(), ctypes.c_uint64()
        code = lib.cuMemCreate(ctypes.byref(handle), self.capacity, ctypes.byref(_device_prop(self.device.index)), 0)
        if code == _OUT_OF_MEMORY:
            free, _ = torch.cuda.mem_get_info(self.device)
            raise torch.OutOfMemoryError(
                f"CUDA out of memory: the rollout's KV cache needs {self.capacity / 2**30:.2f} GiB at wake-up and "
                f"{free / 2**30:.2f} GiB is free on {self.device}")
        _check("cuMemCreate", code)
        try:
            _check("cuMemMap", lib.cuMemMap(self.address, self.capacity, 0, handle.value, 0))
            access = _AccessDesc(_Location(_ON_DEVICE, self.device.index), _READ_WRITE)
            _check("cuMemSetAccess", lib.cuMemSetAccess(self.address, self.capacity, ctypes.byref(access), 1))
        except DriverError:
            lib.cuMemUnmap(self.address, self.capacity)
            lib.cuMemRelease(handle.value)
            raise
        self._state["handle"] = handle.value
        memory.external_bytes_changed(self.device, self.capacity)

    def unmap(self) -> None:
        """Give the physical memory back (after the device finished every queued kernel)."""
        if self.mapped:
            torch.cuda.synchronize(self.device)
            _unmap(self.address, self.capacity, self.device, self._state)

    def tensor(self) -> torch.Tensor:
        """The range as a flat uint8 tensor on the device (view it as the dtype and shape needed)."""
        view = _CudaArray(self.address, self.capacity)
        with torch.cuda.device(self.device):
            return torch.as_tensor(view, device=self.device)

    def close(self) -> None:
        self._finalizer()


class _CudaArray:
    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"data": (address, False), "shape": (nbytes,), "typestr": "|u1",
                                         "version": 3}


def _unmap(address: int, capacity: int, device: torch.device, state: dict) -> None:
    lib = _libcuda()
    _check("cuMemUnmap", lib.cuMemUnmap(address, capacity))
    _check("cuMemRelease", lib.cuMemRelease(state["handle"]))
    state["handle"] = None
    memory.external_bytes_changed(device, -capacity)


def _free(address: int, capacity: int, device: torch.device, state: dict) -> None:
    if state["handle"] is not None:
        torch.cuda.synchronize(device)
        _unmap(address, capacity, device, state)
    _libcuda().cuMemAddressFree(address, capacity)
