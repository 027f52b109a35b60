//! Background tasks tied to the life of their owner: [`AbortOnDrop`].
//!
//! Invariant: a task held by an [`AbortOnDrop`] does not outlive its holder
//! (dropping a `JoinHandle` alone detaches the task instead).

use tokio::task::{AbortHandle, JoinHandle};

/// Aborts a background task when dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) AbortHandle);

impl<T> From<JoinHandle<T>> for AbortOnDrop {
    fn from(handle: JoinHandle<T>) -> AbortOnDrop {
        AbortOnDrop(handle.abort_handle())
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
