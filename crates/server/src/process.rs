//! What every tollgate binary sets for its process: mimalloc as the
//! allocator (`#[global_allocator] static ALLOC: Mimalloc = Mimalloc;` in
//! its main.rs) and no transparent huge pages. `tollgate` and `tollgate-dev`
//! both use them, so the mock provider the benchmarks measure against runs
//! as the gateway does; and the `main` both have ([`main_with`]).

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: the request path allocates and frees
/// many small objects across two worker threads, and glibc's allocator was
/// a fifth of the gateway's CPU in the profile (bench/results/2026-11-29-bench-2135.md).
/// mimalloc, asked for an alignment only when one is needed. The `mimalloc`
/// crate's allocator calls `mi_malloc_aligned` for every allocation, whose
/// checks cost more than `mi_malloc`'s fast path; every mimalloc block is
/// word-aligned (its size classes are whole words), so an alignment of a
/// word or less needs none
/// (bench/results/2026-12-03-the-outbox-event-written-directly-and-three.md).
pub struct Mimalloc;

const WORD_ALIGNED: usize = std::mem::size_of::<usize>();

// SAFETY: each call forwards to mimalloc with the layout's size; blocks from
// `mi_malloc`/`mi_zalloc`/`mi_realloc` are word-aligned, so they are used
// only for alignments of at most a word, and the `_aligned` calls for the
// rest; `mi_free` frees blocks of either kind.
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys as mi;
        unsafe {
            if l.align() <= WORD_ALIGNED {
                mi::mi_malloc(l.size()).cast()
            } else {
                mi::mi_malloc_aligned(l.size(), l.align()).cast()
            }
        }
    }

    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys as mi;
        unsafe {
            if l.align() <= WORD_ALIGNED {
                mi::mi_zalloc(l.size()).cast()
            } else {
                mi::mi_zalloc_aligned(l.size(), l.align()).cast()
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _: std::alloc::Layout) {
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, l: std::alloc::Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys as mi;
        unsafe {
            if l.align() <= WORD_ALIGNED {
                mi::mi_realloc(ptr.cast(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast(), new_size, l.align()).cast()
            }
        }
    }
}

/// No transparent huge pages for this process. mimalloc asks for them on
/// its arenas (`madvise`), and one 2 MB page per arena touched made the idle
/// gateway 108 MB instead of 80 (bench/results/2026-11-30-bench.md, "Memory"); the TLB
/// gain is not measurable on this request path. The same call Redis and
/// most databases recommend.
pub fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_THP_DISABLE reads only its integer
    // arguments and changes a flag of this process.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// A binary's `main`: no huge pages, the log on stderr (`TOLLGATE_LOG`,
/// default `info,sqlx=warn`), then `run` on a tokio runtime. Exit 0 when it
/// returns `Ok(true)`, 1 on `Ok(false)` (a check that found something), 2
/// on an error (printed).
pub fn main_with(run: impl std::future::Future<Output = anyhow::Result<bool>>) -> ExitCode {
    no_transparent_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOLLGATE_LOG")
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    match rt.block_on(run) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout};

    /// A block: not null, aligned, and its first `len` bytes all `byte`.
    ///
    /// # Safety
    /// `p` is null or points to at least `len` initialised bytes.
    unsafe fn check(p: *mut u8, align: usize, len: usize, byte: u8, what: &str) {
        assert!(!p.is_null() && (p as usize).is_multiple_of(align), "{what}");
        let bytes = unsafe { std::slice::from_raw_parts(p, len) };
        assert!(bytes.iter().all(|&b| b == byte), "{what}");
    }

    /// Every alignment from 1 to 4 KiB and sizes from 1 byte to 2 MiB:
    /// blocks come back aligned, zeroed when asked, and keep their bytes
    /// through a realloc that grows and one that shrinks.
    #[test]
    fn blocks_are_aligned_zeroed_and_kept() {
        let a = Mimalloc;
        for align in (0..=12).map(|s| 1usize << s) {
            for size in [1, 3, 8, 13, 24, 100, 1024, 4097, 70_000, 2 << 20] {
                let l = Layout::from_size_align(size, align).unwrap();
                let what = format!("{size} bytes aligned to {align}");
                unsafe {
                    let p = a.alloc(l);
                    check(p, align, 0, 0, &what);
                    p.write_bytes(0xa5, size);
                    check(p, align, size, 0xa5, &what);
                    a.dealloc(p, l);

                    let z = a.alloc_zeroed(l);
                    check(z, align, size, 0, &what);
                    z.write_bytes(0x5a, size);
                    let grown = Layout::from_size_align(size * 3 + 5, align).unwrap();
                    let g = a.realloc(z, l, grown.size());
                    check(g, align, size, 0x5a, &what);
                    let shrunk = Layout::from_size_align(size.div_ceil(2), align).unwrap();
                    let s = a.realloc(g, grown, shrunk.size());
                    check(s, align, shrunk.size(), 0x5a, &what);
                    a.dealloc(s, shrunk);
                }
            }
        }
    }
}
