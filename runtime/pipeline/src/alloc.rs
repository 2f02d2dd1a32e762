//! glibc's allocator, tuned for a process that moves tens-of-MB batches.
//!
//! By default glibc serves every allocation above its mmap threshold with a fresh `mmap` and
//! returns it with `munmap` when freed, so each batch buffer page-faults all of its pages again
//! (a tenth of the data service's CPU time in a profile) and the heap top is trimmed back to
//! the kernel after every batch. Keeping large blocks in the heap and not trimming it made
//! the loopback stream about 35% faster, and the one-core pipeline (whose decode windows and
//! resized images are hundreds of kB each) about 30% (BENCHMARKS.md).
//!
//! One arena: glibc gives threads their own arenas made of 64 MiB heaps, and deletes a heap
//! (munmap) as soon as it is entirely free, whatever the trim threshold says. A 19 MB batch
//! freed by the trainer's thread could take a whole heap with it, and the next one came back as
//! fresh, kernel-cleared pages: the loopback stream then ran at half speed in one
//! measurement out of two. Threads allocating large blocks a few thousand times a second do
//! not contend noticeably on one arena; small blocks stay in glibc's per-thread caches.
//! Other allocators are left alone.

/// Apply the tuning; call once at start-up, before the first batch.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is called before any thread that
    // allocates batches exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Give the heap's free memory back to the kernel: the tuning above keeps freed batches in the
/// heap for speed, so a process whose peak has passed calls this to stop holding it.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the heap; it is safe at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
