//! What a verified enqueue token says.

/// The parts of a verified enqueue token the join uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueClaims {
    /// The store's account id. Hash it ([`super::AccountHasher`]) before it
    /// goes anywhere: no account id is kept, logged or counted.
    pub sub: String,
    /// A configured lane; `None`: the room's default lane.
    pub lane: Option<String>,
    pub iat: u64,
    pub exp: u64,
}
