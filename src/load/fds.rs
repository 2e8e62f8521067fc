//! The open-file limit a load needs: one file per connection, a few per thread, and
//! memtrial's own; raised to the hard limit when it must be, refused with what to do
//! when even that cannot hold the connections.

/// Open files a load needs besides one per connection: per thread an epoll and a
/// timerfd, and memtrial's own (standard streams, the database, run logs, `/proc` reads).
pub(crate) const FD_RESERVE: u64 = 64;

/// Open files a load of `connections` on `threads` threads needs.
pub(crate) fn fds_needed(connections: usize, threads: usize) -> u64 {
    connections as u64 + 2 * threads as u64 + FD_RESERVE
}

/// The open-file limit (`RLIMIT_NOFILE`) cannot hold the connections.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{connections} connections need about {needed} open files, but this process may open at most {hard} (the hard limit, `ulimit -Hn`); use at most {fit} connections, or raise the hard limit (e.g. `ulimit -n {needed}` as root, or LimitNOFILE= in a systemd unit)")]
pub struct FdLimitError {
    pub connections: usize,
    pub needed: u64,
    pub hard: u64,
    /// The most connections that fit.
    pub fit: u64,
}

fn nofile() -> Option<libc::rlimit> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r)
}

fn too_many(connections: usize, threads: usize, hard: u64) -> FdLimitError {
    FdLimitError {
        connections,
        needed: fds_needed(connections, threads),
        hard,
        fit: hard.saturating_sub(fds_needed(0, threads)),
    }
}

/// The open-file limit (soft, hard) memtrial started with, when it raised it for a load.
static ORIGINAL_NOFILE: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();

/// The open-file limit as it was before memtrial raised it for its own connections, if
/// it did: the workload is given this one, so that it runs as it would without memtrial.
pub(crate) fn original_nofile() -> Option<libc::rlimit> {
    ORIGINAL_NOFILE.get().map(|(cur, max)| libc::rlimit {
        rlim_cur: *cur,
        rlim_max: *max,
    })
}

/// Makes room for a load's connections: raises the soft open-file limit to what the
/// load needs when it is lower (never past the hard limit, never lowering it). Returns a
/// note for the user when it raised the limit; an error when the connections cannot fit.
pub fn ensure_fd_limit(connections: usize, threads: usize) -> Result<Option<String>, FdLimitError> {
    let needed = fds_needed(connections, threads);
    let Some(r) = nofile() else {
        return Ok(None);
    };
    let (soft, hard) = (r.rlim_cur, r.rlim_max);
    let infinite = |v: u64| v == libc::RLIM_INFINITY;
    if infinite(soft) || soft >= needed {
        return Ok(None);
    }
    if !infinite(hard) && hard < needed {
        return Err(too_many(connections, threads, hard));
    }
    let _ = ORIGINAL_NOFILE.set((r.rlim_cur, r.rlim_max));
    let raised = libc::rlimit {
        rlim_cur: needed,
        rlim_max: r.rlim_max,
    };
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(too_many(connections, threads, soft));
    }
    Ok(Some(format!(
        "raised the open-file limit from {soft} to {needed} for {connections} connections"
    )))
}

/// Checks, without changing anything, that the open-file limit holds the connections.
pub(crate) fn check_fd_limit(connections: usize, threads: usize) -> Result<(), FdLimitError> {
    let Some(r) = nofile() else {
        return Ok(());
    };
    let soft = r.rlim_cur;
    if soft != libc::RLIM_INFINITY && soft < fds_needed(connections, threads) {
        return Err(too_many(connections, threads, soft));
    }
    Ok(())
}
