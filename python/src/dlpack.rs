//! Arrays in device memory through DLPack: the capsules of torch (or CuPy) tensors on a GPU,
//! read and checked, never consumed.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// DLPack's C structures (dlpack.h, the unversioned `dltensor` capsule).
#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut std::ffi::c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut std::ffi::c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

const DL_CUDA: i32 = 2;
const DL_FLOAT: u8 = 2;

/// A dense float32 array in the memory of one CUDA device.
pub(crate) struct DeviceArray {
    pub(crate) ptr: u64,
    pub(crate) shape: Vec<usize>,
    pub(crate) device: usize,
}

impl DeviceArray {
    pub(crate) fn len(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The array behind a DLPack capsule (`tensor.__dlpack__(stream=...)`), checked: on a CUDA
/// device, float32, C order without gaps. The capsule is only read: its producer keeps the
/// memory until the capsule is collected, which the caller's reference outlives this call.
pub(crate) fn device_array(capsule: &Bound<'_, PyAny>, what: &str) -> PyResult<DeviceArray> {
    let py = capsule.py();
    // SAFETY: PyCapsule_GetPointer checks that the object is a capsule named "dltensor" and
    // returns its pointer, or NULL with an exception set (taken below); the GIL is held.
    let p = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), c"dltensor".as_ptr()) };
    if p.is_null() {
        let _ = PyErr::take(py);
        return Err(PyValueError::new_err(format!(
            "{what}: not an unconsumed DLPack capsule (pass tensor.__dlpack__())"
        )));
    }
    // SAFETY: a "dltensor" capsule holds a DLManagedTensor (DLPack's contract), alive while the
    // capsule is; `shape` and `strides` (or NULL) hold `ndim` values each.
    let t = unsafe { &(*(p as *const DlManagedTensor)).dl_tensor };
    if t.device.device_type != DL_CUDA {
        return Err(PyValueError::new_err(format!(
            "{what}: DLPack device type {} is not CUDA",
            t.device.device_type
        )));
    }
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (DL_FLOAT, 32, 1) {
        return Err(PyValueError::new_err(format!(
            "{what}: must be float32 (DLPack code {}, {} bits)",
            t.dtype.code, t.dtype.bits
        )));
    }
    let ndim = usize::try_from(t.ndim).unwrap_or(0);
    let raw_shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: `shape` holds `ndim` values (DLPack's contract).
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let shape: Vec<usize> = raw_shape.iter().map(|&n| n.max(0) as usize).collect();
    if !t.strides.is_null() && ndim > 0 {
        // SAFETY: non-NULL `strides` holds `ndim` values.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let mut want = 1i64;
        for a in (0..ndim).rev() {
            if shape[a] > 1 && strides[a] != want {
                return Err(PyValueError::new_err(format!(
                    "{what}: must be contiguous in C order (strides {strides:?} for shape \
                     {shape:?}); pass tensor.contiguous()"
                )));
            }
            want *= raw_shape[a].max(1);
        }
    }
    Ok(DeviceArray {
        ptr: t.data as u64 + t.byte_offset,
        shape,
        device: usize::try_from(t.device.device_id).unwrap_or(0),
    })
}

pub(crate) fn same_device(arrays: &[&DeviceArray], device: usize) -> PyResult<()> {
    for a in arrays {
        if a.device != device {
            return Err(PyValueError::new_err(format!(
                "arrays on cuda:{} and cuda:{device}: augscope works on one device per call",
                a.device
            )));
        }
    }
    Ok(())
}
