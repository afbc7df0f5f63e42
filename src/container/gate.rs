//! How many containers are created at once.
//!
//! A container's create is mostly the kernel's work under one lock of the
//! node: its init's new mount namespace is a copy of the node's whole
//! mount table, its old root is unmounted, and libcontainer reads the
//! table several times, each under the lock that every mount and unmount
//! of the node takes. A burst (a kubelet starting a thousand pods at
//! once) made every create wait on all the others, so each took minutes,
//! past the monitor's 60 s answer time, and failed. At most twice as many
//! creates as the node has CPUs run at once; the others wait their turn
//! here, in the server, where waiting costs nothing.

use std::sync::{Condvar, Mutex, OnceLock};

/// A counting gate: `enter` waits for a free place, and the returned
/// guard gives it back when dropped.
pub struct Gate {
    free: Mutex<usize>,
    freed: Condvar,
}

pub struct Place<'a>(&'a Gate);

impl Gate {
    pub const fn new(places: usize) -> Gate {
        Gate {
            free: Mutex::new(places),
            freed: Condvar::new(),
        }
    }

    pub fn enter(&self) -> Place<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        Place(self)
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

/// The gate of container creates: twice the node's CPUs.
pub fn creates() -> &'static Gate {
    static GATE: OnceLock<Gate> = OnceLock::new();
    GATE.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Gate::new(2 * cpus)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn no_more_than_its_places_are_inside_at_once() {
        let gate = Arc::new(Gate::new(2));
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gate, inside, most) = (gate.clone(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    let _p = gate.enter();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("join");
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(
            *gate.free.lock().expect("lock"),
            2,
            "every place given back"
        );
    }
}
