//! A cancellation signal shared by every in-flight request (Ctrl-C).

use std::sync::Arc;

use tokio::sync::watch;

/// Clone freely; [`Cancel::cancel`] wakes every [`Cancel::cancelled`] waiter.
#[derive(Debug, Clone)]
pub struct Cancel {
    tx: Arc<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(false);
        Self {
            tx: Arc::new(tx),
            rx,
        }
    }

    /// Signals cancellation (idempotent).
    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once cancelled (immediately if already cancelled).
    pub async fn cancelled(&self) {
        let mut rx = self.rx.clone();
        // An error means the sender is gone, which cannot happen while `self` holds it.
        let _ = rx.wait_for(|c| *c).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_waiters() {
        let c = Cancel::new();
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { c2.cancelled().await });
        assert!(!c.is_cancelled());
        c.cancel();
        waiter.await.unwrap();
        assert!(c.is_cancelled());
        // Already cancelled: returns at once.
        c.cancelled().await;
    }
}
