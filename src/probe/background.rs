//! One request at a time to a thread of its own, its result polled without blocking: how
//! the probes whose reads walk page tables (PSS, regions) keep them off the run's clock.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

/// A worker thread doing `work` on each request, one in flight at a time.
pub(crate) struct Background<Req, Res> {
    /// `None` when the thread could not be started: nothing is ever read then.
    tx: Option<Sender<Req>>,
    rx: Receiver<Res>,
    busy: bool,
}

impl<Req: Send + 'static, Res: Send + 'static> Background<Req, Res> {
    pub(crate) fn new(name: &str, work: impl Fn(Req) -> Res + Send + 'static) -> Self {
        let (tx, requests) = channel::<Req>();
        let (done, rx) = channel();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Ok(r) = requests.recv() {
                    if done.send(work(r)).is_err() {
                        return;
                    }
                }
            });
        Background {
            tx: spawned.ok().map(|_| tx),
            rx,
            busy: false,
        }
    }

    /// A request is in flight.
    pub(crate) fn busy(&self) -> bool {
        self.busy
    }

    /// Sends `r` when nothing is in flight; whether it was sent.
    pub(crate) fn request(&mut self, r: Req) -> bool {
        if self.busy {
            return false;
        }
        self.busy = self.tx.as_ref().is_some_and(|tx| tx.send(r).is_ok());
        self.busy
    }

    /// The result of the request in flight, if it is done.
    pub(crate) fn poll(&mut self) -> Option<Res> {
        let r = self.rx.try_recv().ok()?;
        self.busy = false;
        Some(r)
    }

    /// The result of the request in flight, waiting at most `timeout` for it.
    pub(crate) fn wait(&mut self, timeout: Duration) -> Option<Res> {
        if !self.busy {
            return None;
        }
        let r = self.rx.recv_timeout(timeout).ok()?;
        self.busy = false;
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_at_a_time() {
        let mut b = Background::new("test-bg", |x: u32| x * 2);
        assert!(!b.busy());
        assert!(b.request(21));
        assert!(!b.request(1), "one in flight at a time");
        assert_eq!(b.wait(Duration::from_secs(5)), Some(42));
        assert!(!b.busy());
        assert_eq!(b.poll(), None);
        assert_eq!(b.wait(Duration::from_millis(1)), None, "nothing in flight");
    }
}
