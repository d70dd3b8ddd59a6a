//! The library's global allocator: mimalloc, counting the bytes Rust holds, so the native
//! side's memory is visible from Elixir (`RakNet.native_memory/0`) the way `:erlang.memory/0`
//! shows the BEAM's. One relaxed atomic add per allocation and free.
//!
//! Why not the system allocator: a message's bytes are allocated on the scheduler that called
//! `conn_send` and freed on the endpoint's thread once the peer acknowledged them. glibc's
//! malloc takes such a free back under the allocating arena's lock: in profiles the two
//! threads contended for it (futex wake-ups from `__lll_lock_wake_private`), and `_int_free`
//! and `malloc_consolidate` were among the endpoint thread's hottest functions. mimalloc gives
//! each thread its own heap and takes frees from other threads on a lock-free list. One
//! connection sending one way into a handler (scenario 1 of `make bench`, run as 10 runs of
//! 2 M messages on a 2-core Intel Xeon VM) went from 1.50 M to 1.65 M messages a second
//! (median). It is built with `local_dynamic_tls`, the thread-local storage model a library
//! loaded at run time (`dlopen`, as the BEAM loads a NIF) can always use.
//!
//! The count is of live bytes, not of the process's resident memory: mimalloc keeps freed
//! pages per thread for a while before it returns them to the system.
//!
//! The crate's only `unsafe`: implementing `GlobalAlloc` requires it. Every method forwards to
//! `MiMalloc` unchanged.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use mimalloc::MiMalloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);

pub(crate) struct Counting;

/// Bytes currently allocated by Rust code in this library (all endpoints and connections).
pub(crate) fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

// SAFETY: every call is forwarded to `MiMalloc` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        let p = unsafe { MiMalloc.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `MiMalloc`) with `layout`.
        unsafe { MiMalloc.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; on failure the old block is untouched and still counted.
        let p = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}
