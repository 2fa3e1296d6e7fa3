//! The overlay thread: it computes the newest request (one waiting is replaced by a newer one),
//! stops between views and planes when a newer one arrives, and sends the results to the UI.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::{OverlayEngine, Reply, Request};

#[derive(Default)]
struct Slot {
    /// `Some(None)`: drop what is kept; `Some(Some(r))`: compute `r`.
    request: Option<Option<Request>>,
    shutdown: bool,
}

struct Shared {
    slot: Mutex<Slot>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a newer request (or a shutdown) waits.
    fn superseded(&self) -> bool {
        let s = self.lock();
        s.shutdown || s.request.is_some()
    }
}

/// The UI's handle on the overlay thread.
pub(super) struct OverlayThread {
    shared: Arc<Shared>,
    pub(super) replies: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

impl OverlayThread {
    pub(super) fn spawn(repaint: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            wake: Condvar::new(),
        });
        let (tx, replies) = channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("augscope-overlay".into())
            .spawn(move || run(s, tx, repaint))?;
        Ok(OverlayThread {
            shared,
            replies,
            thread: Some(thread),
        })
    }

    pub(super) fn post(&self, req: Option<Request>) {
        self.shared.lock().request = Some(req);
        self.shared.wake.notify_one();
    }
}

impl Drop for OverlayThread {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: Arc<Shared>, tx: Sender<Reply>, repaint: impl Fn()) {
    let mut engine = OverlayEngine::default();
    loop {
        let req = {
            let mut s = shared.lock();
            while !s.shutdown && s.request.is_none() {
                s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            if s.shutdown {
                return;
            }
            s.request.take().flatten()
        };
        let Some(req) = req else {
            engine = OverlayEngine::default();
            continue;
        };
        let stop = || shared.superseded();
        let send = |r: Reply| {
            let _ = tx.send(r);
            repaint();
        };
        // The volume's field takes seconds on a large scan: the planes from field planes first.
        if req.jacobian && req.volume && !engine.has_volume_field(&req) {
            let quick = Request {
                volume: false,
                ..req.clone()
            };
            match engine.planes(&quick, &stop) {
                Ok(Some(p)) => send(Reply::Planes(p)),
                Ok(None) => continue,
                Err(_) => {}
            }
        }
        match engine.planes(&req, &stop) {
            Ok(Some(p)) => send(Reply::Planes(p)),
            Ok(None) => continue,
            Err(message) => {
                send(Reply::Failed {
                    generation: req.generation,
                    message,
                });
                continue;
            }
        }
        if req.jacobian && req.volume {
            match engine.volume(&req, &stop) {
                Ok(Some(v)) => send(Reply::Volume(v)),
                Ok(None) => {}
                Err(message) => send(Reply::Failed {
                    generation: req.generation,
                    message,
                }),
            }
        }
    }
}
