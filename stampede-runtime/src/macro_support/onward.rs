//! What a generated call goes on to when its lookup did not answer it (see [`Onward`]).
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project_lite::pin_project! {
    /// What a call goes on to when its lookup did not answer it: the load (detached or
    /// inline), or, boxed, one of the rare per-call modes (`refresh`, `bypass`). One type,
    /// awaited at one point, so the function `#[cached]` writes has one suspended state to
    /// poll and to drop.
    #[project = OnwardProjection]
    pub enum Onward<L, R> {
        /// The load after a lookup.
        Load { #[pin] load: L },
        /// A forced refresh or a bypass.
        Rare { rare: Pin<Box<R>> },
    }
}

impl<L, R> Onward<L, R> {
    /// The load after a lookup.
    pub fn load(load: L) -> Self {
        Onward::Load { load }
    }

    /// A forced refresh or a bypass, boxed: its state stays out of every call's future.
    pub fn rare(rare: R) -> Self {
        Onward::Rare {
            rare: Box::pin(rare),
        }
    }
}

impl<T, L, R> Future for Onward<L, R>
where
    L: Future<Output = T>,
    R: Future<Output = T>,
{
    type Output = T;

    /// Never inlined: a load's locals would otherwise widen the stack frame of the
    /// function's own poll, which every fresh hit runs (measured: a 9 KB frame, two stack
    /// probes; with the single suspended state, 19 instructions a hit).
    #[inline(never)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.project() {
            OnwardProjection::Load { load } => load.poll(cx),
            OnwardProjection::Rare { rare } => rare.as_mut().poll(cx),
        }
    }
}
