//! The undo steps of a RunPodSandbox in progress: each step that made
//! something pushes how to unmake it, and a failure runs them in reverse.

/// One undo step: what it undoes, and how.
type UndoStep = (&'static str, Box<dyn FnOnce() + Send>);

/// Undo steps of a RunPodSandbox in progress, run in reverse on failure.
#[derive(Default)]
pub(super) struct Undo(Vec<UndoStep>);

impl Undo {
    pub(super) fn push(&mut self, what: &'static str, f: impl FnOnce() + Send + 'static) {
        self.0.push((what, Box::new(f)));
    }
    pub(super) fn unwind(self) {
        for (what, f) in self.0.into_iter().rev() {
            tracing::debug!(step = what, "unwinding");
            f();
        }
    }
    pub(super) fn commit(mut self) {
        self.0.clear();
    }
}
