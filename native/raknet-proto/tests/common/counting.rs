//! A global allocator that counts the bytes a test binary has allocated, for the tests that
//! check what the engine really holds. A binary that uses it declares it
//! (`#[global_allocator] static ALLOC: Counting = Counting;`) and holds one test only: a
//! second test running on another thread would disturb the count.

// Implementing `GlobalAlloc` requires `unsafe`; every method forwards to `System` unchanged.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts the bytes currently allocated by this test binary.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// What an allocation of `size` bytes takes from glibc's malloc: a chunk with an 8-byte
/// header, rounded up to 16 bytes, of 32 at least. Counting requested sizes alone would miss
/// most of what many tiny allocations cost.
fn chunk(size: usize) -> isize {
    ((size + 8).div_ceil(16) * 16).max(32) as isize
}

// SAFETY: every call is forwarded to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; on failure the old block is untouched and still counted.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(chunk(new_size) - chunk(layout.size()), Ordering::Relaxed);
        }
        p
    }
}

/// Bytes allocated now, in malloc chunks ([`chunk`]).
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}
