//! Large work buffers on transparent huge pages. The first write to a fresh page faults into the
//! kernel, which zeroes it; with 4 KiB pages a 35 MB field component takes about 8,500 faults,
//! which on a virtual machine cost a sizeable part of the gaussian passes over it. Where the
//! system leaves huge pages to the program (`/sys/kernel/mm/transparent_hugepage/enabled` set to
//! `madvise`, a common default), `madvise(MADV_HUGEPAGE)` on a buffer before its first write lets
//! the kernel back it with 2 MiB pages. The values are unchanged: only how memory is mapped.
#![allow(unsafe_code)] // one madvise call on a buffer this module has just allocated; see `advise`.

/// Buffers smaller than this are left as they are (a huge page is 2 MiB).
const MIN_BYTES: usize = 4 << 20;

/// `n` zeroed f32 values, on huge pages where the system allows it.
pub fn zeroed_f32(n: usize) -> Vec<f32> {
    let v = vec![0f32; n];
    advise(&v);
    v
}

/// `v` resized to `n` values (new values zero); a buffer that must grow is allocated anew with
/// [`zeroed_f32`] (its old values are dropped: for work buffers that are written before they are
/// read).
pub fn scratch_f32(v: &mut Vec<f32>, n: usize) {
    if v.capacity() < n {
        *v = zeroed_f32(n);
    } else {
        v.resize(n, 0.0);
    }
}

#[cfg(target_os = "linux")]
fn advise(v: &[f32]) {
    let bytes = std::mem::size_of_val(v);
    if bytes < MIN_BYTES {
        return;
    }
    // SAFETY: sysconf reads a constant of the system.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => return,
    };
    let start = v.as_ptr() as usize;
    let lo = start.next_multiple_of(page);
    let hi = (start + bytes) / page * page;
    if hi > lo {
        // SAFETY: [lo, hi) is page-aligned and lies inside `v`'s allocation, which outlives the
        // call; MADV_HUGEPAGE is advice on how to back the range and neither reads nor changes
        // its contents. An error (a kernel without huge pages) leaves the buffer as it was.
        unsafe {
            libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_: &[f32]) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_and_sized() {
        for n in [0, 5, 3 << 20] {
            let v = zeroed_f32(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 0.0));
        }
        let mut s = vec![1f32; 10];
        scratch_f32(&mut s, 4);
        assert_eq!(s.len(), 4);
        scratch_f32(&mut s, 2 << 20);
        assert_eq!(s.len(), 2 << 20);
        assert!(s.iter().all(|&x| x == 0.0));
    }
}
