//! A payment attempt's words, with no store: the provider [`Operation`],
//! its [`Transport`] (did an answer arrive?) and its [`AttemptOutcome`]
//! (what happened), and the attempt's idempotency key.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Authorize,
    Capture,
    Void,
    Refund,
}

impl Operation {
    pub const ALL: [Operation; 4] = [
        Operation::Authorize,
        Operation::Capture,
        Operation::Void,
        Operation::Refund,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Authorize => "authorize",
            Operation::Capture => "capture",
            Operation::Void => "void",
            Operation::Refund => "refund",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == s)
    }
    /// Void and refund undo money: they are compensations.
    pub fn is_compensation(self) -> bool {
        matches!(self, Operation::Void | Operation::Refund)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Pending,
    Sent,
    TimedOut,
    Answered,
}

impl Transport {
    pub const ALL: [Transport; 4] = [
        Transport::Pending,
        Transport::Sent,
        Transport::TimedOut,
        Transport::Answered,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Pending => "pending",
            Transport::Sent => "sent",
            Transport::TimedOut => "timed_out",
            Transport::Answered => "answered",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Unknown,
    Succeeded,
    Declined,
    Failed,
}

impl AttemptOutcome {
    pub const ALL: [AttemptOutcome; 4] = [
        AttemptOutcome::Unknown,
        AttemptOutcome::Succeeded,
        AttemptOutcome::Declined,
        AttemptOutcome::Failed,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Unknown => "unknown",
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Declined => "declined",
            AttemptOutcome::Failed => "failed",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// The idempotency key of `operation` on `order_id`.
pub fn attempt_key(order_id: &str, operation: Operation) -> String {
    format!("{order_id}:{}", operation.as_str())
}
