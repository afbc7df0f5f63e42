//! Graceful deletions from the API server, as the pod workers track them:
//! the first update carrying a `deletionTimestamp` starts the termination
//! with the deletion's grace period; a later update with a shorter one
//! (`kubectl delete --grace-period=1` after a default delete, or a force
//! delete) cuts the running stops short; updates of a pod already
//! terminated for its deletion (the API server's last MODIFIED before the
//! DELETED) are nothing new.

use std::collections::{HashMap, HashSet};

#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Terminate the pod with its grace period.
    Start,
    /// Already terminating: stop what still runs within this many seconds.
    Shorten(i64),
    Nothing,
}

#[derive(Default)]
pub struct Deletions {
    grace: HashMap<String, i64>,
    done: HashSet<String>,
}

impl Deletions {
    /// An update of a pod being deleted, with the grace period it carries.
    pub fn update(&mut self, uid: &str, grace: i64) -> Action {
        if self.done.contains(uid) {
            return Action::Nothing;
        }
        match self.grace.get(uid).copied() {
            None => {
                self.grace.insert(uid.to_string(), grace);
                Action::Start
            }
            Some(g) if grace < g => {
                self.grace.insert(uid.to_string(), grace);
                Action::Shorten(grace)
            }
            Some(_) => Action::Nothing,
        }
    }

    /// The pod's termination finished.
    pub fn finished(&mut self, uid: &str) {
        if self.grace.remove(uid).is_some() {
            self.done.insert(uid.to_string());
        }
    }

    /// The pod is gone from its source.
    pub fn forget(&mut self, uid: &str) {
        self.grace.remove(uid);
        self.done.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shorter_grace_cuts_the_termination_short_once() {
        let mut d = Deletions::default();
        assert_eq!(d.update("u", 30), Action::Start);
        assert_eq!(d.update("u", 30), Action::Nothing);
        assert_eq!(d.update("u", 1), Action::Shorten(1));
        assert_eq!(d.update("u", 5), Action::Nothing);
        d.finished("u");
        assert!(d.done.contains("u"));
        assert_eq!(d.update("u", 0), Action::Nothing);
        d.forget("u");
        assert!(!d.done.contains("u"));
        assert_eq!(d.update("u", 30), Action::Start);
        // A pod terminated for another reason is not marked done.
        d.finished("v");
        assert!(!d.done.contains("v"));
    }
}
