//! How often an idle worker looks for due work.
//!
//! apalis' own `IntervalStrategy` replaces a fired timer with a new one it does not poll,
//! so no wake-up is registered and an idle worker can sleep until the 30 s heartbeat (seen
//! as jobs waiting ~20 s in our tests). This strategy re-arms and polls its timer in the
//! same call, honouring the trait's contract that `Pending` always leaves a waker behind.
use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use apalis_core::backend::ext::poll_strategy::{PollSnapshot, PollStrategy};
use tokio::time::{Instant, Sleep};

pub struct Tick {
    every: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Tick {
    pub fn new(every: Duration) -> Self {
        Tick {
            every,
            sleep: Box::pin(tokio::time::sleep(every)),
        }
    }
}

impl PollStrategy for Tick {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        let mut fired = false;
        while self.sleep.as_mut().poll(cx).is_ready() {
            fired = true;
            let next = Instant::now() + self.every;
            self.sleep.as_mut().reset(next);
        }
        if fired {
            Poll::Ready(Some(()))
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    struct CountingWaker(AtomicUsize);
    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn every_tick_leaves_a_wake_up_for_the_next_one() {
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut tick = Tick::new(Duration::from_millis(20));
        let snap = PollSnapshot::default();
        assert!(tick.poll_drive(&mut cx, &snap).is_pending());
        for round in 1..=3 {
            // Without anyone polling in between, the timer alone must wake us.
            tokio::time::sleep(Duration::from_millis(60)).await;
            assert!(
                counter.0.load(Ordering::SeqCst) >= round,
                "round {round}: no wake-up"
            );
            assert!(tick.poll_drive(&mut cx, &snap).is_ready());
            assert!(tick.poll_drive(&mut cx, &snap).is_pending());
        }
    }
}
