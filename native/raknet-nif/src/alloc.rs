//! The library's global allocator: mimalloc, counting the bytes Rust holds, so the native
//! side's memory is visible from Elixir (`RakNet.native_memory/0`) the way `:erlang.memory/0`
//! shows the BEAM's. One relaxed atomic add per allocation and free, on a counter of the
//! calling thread's own (see [`SHARDS`]).
//!
//! Why not the system allocator: a message's bytes are allocated on the scheduler that called
//! `conn_send` and freed on the endpoint's thread once the peer acknowledged them. glibc's
//! malloc takes such a free back under the allocating arena's lock: in profiles the two
//! threads contended for it (futex wake-ups from `__lll_lock_wake_private`), and `_int_free`
//! and `malloc_consolidate` were among the endpoint thread's hottest functions. mimalloc gives
//! each thread its own heap and takes frees from other threads on a lock-free list (the
//! gain on `make bench`'s one-way scenario is in the CHANGELOG). It is built with
//! `local_dynamic_tls`, the thread-local storage model a library loaded at run time
//! (`dlopen`, as the BEAM loads a NIF) can always use.
//!
//! The count is of live bytes, not of the process's resident memory: mimalloc keeps freed
//! pages per thread for a while before it returns them to the system.
//!
//! It is kept in [`SHARDS`] counters, each on a cache line of its own; a thread adds to the
//! one it was given on its first allocation, and reading the count sums them. A single
//! counter would be written by the sender's scheduler and the endpoint thread for every
//! message, its cache line moving between the cores each time. A thread may free what
//! another allocated, so a shard can go below zero; the sum cannot.
//!
//! The crate's only `unsafe`: implementing `GlobalAlloc` requires it. Every method forwards to
//! `MiMalloc` unchanged.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use mimalloc::MiMalloc;

/// More than the threads that allocate in practice (schedulers, dirty schedulers, endpoint
/// threads); beyond that, threads share shards, which stays correct.
const SHARDS: usize = 64;

/// A counter alone on its cache line (128 bytes: adjacent-line prefetching pairs lines).
#[repr(align(128))]
struct Shard(AtomicIsize);

static LIVE: [Shard; SHARDS] = [const { Shard(AtomicIsize::new(0)) }; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard (`usize::MAX`: none given yet). Constant-initialised and without
    /// a destructor, so reading it never allocates.
    static MY_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

pub(crate) struct Counting;

/// Bytes currently allocated by Rust code in this library (all endpoints and connections).
pub(crate) fn live_bytes() -> usize {
    let sum = LIVE
        .iter()
        .map(|shard| shard.0.load(Ordering::Relaxed))
        .fold(0isize, isize::wrapping_add);
    usize::try_from(sum).unwrap_or(0)
}

/// The calling thread's counter (the first one for a thread whose thread-locals are gone).
fn shard() -> &'static AtomicIsize {
    let index = MY_SHARD
        .try_with(|mine| {
            if mine.get() == usize::MAX {
                mine.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            mine.get()
        })
        .unwrap_or(0);
    &LIVE[index].0
}

/// A size as a signed count: no allocation exceeds `isize::MAX` bytes.
#[allow(clippy::cast_possible_wrap)]
fn signed(size: usize) -> isize {
    size as isize
}

// SAFETY: every call is forwarded to `MiMalloc` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        let p = unsafe { MiMalloc.alloc(layout) };
        if !p.is_null() {
            shard().fetch_add(signed(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            shard().fetch_add(signed(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `MiMalloc`) with `layout`.
        unsafe { MiMalloc.dealloc(ptr, layout) };
        shard().fetch_sub(signed(layout.size()), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; on failure the old block is untouched and still counted.
        let p = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shard().fetch_add(
                signed(new_size).wrapping_sub(signed(layout.size())),
                Ordering::Relaxed,
            );
        }
        p
    }
}
