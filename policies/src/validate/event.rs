//! A room as an event: when joins open (`prequeue_at`), the draw
//! (`opens_at`), when joins close (`closes_at`); its `message`, its `mode`
//! (queue or standby) and `pass_idle_s`.

use std::time::Duration;

use toml::Spanned;

use super::{nz32, Validator, DAY_S};
use crate::model::RoomMode;

/// Characters a room's `message` may hold, at most.
pub const MESSAGE_CHARS_MAX: usize = 280;
/// The shortest `pass_idle_s` other than 0 (off): a shopper reading a
/// product page for a few seconds is not idle.
pub const PASS_IDLE_MIN_S: i64 = 10;

/// A room's event times, in unix seconds.
pub(super) struct EventTimes {
    pub prequeue_at_unix: Option<u64>,
    pub opens_at_unix: Option<u64>,
    pub closes_at_unix: Option<u64>,
}

impl Validator<'_> {
    /// `prequeue_at`, `opens_at`, `closes_at`, in that order in time: the
    /// pre-queue opens no later than the draw, and the event closes after
    /// both.
    pub(super) fn event_times(
        &mut self,
        prequeue_at: Option<Spanned<toml::value::Datetime>>,
        opens_at: Option<Spanned<toml::value::Datetime>>,
        closes_at: Option<Spanned<toml::value::Datetime>>,
    ) -> EventTimes {
        let prequeue_span = prequeue_at.as_ref().map(|d| d.span());
        let closes_span = closes_at.as_ref().map(|d| d.span());
        let prequeue_at_unix = prequeue_at.and_then(|d| self.datetime(d, "prequeue_at"));
        let opens_at_unix = opens_at.and_then(|d| self.datetime(d, "opens_at"));
        let closes_at_unix = closes_at.and_then(|d| self.datetime(d, "closes_at"));
        if let (Some(pre), Some(open)) = (prequeue_at_unix, opens_at_unix) {
            if pre > open {
                self.problems.push(self.loc.at(
                    prequeue_span.clone(),
                    format!("`prequeue_at` is {} s after `opens_at`: the pre-queue must open no later than the draw", pre - open),
                ));
            }
        }
        if let Some(close) = closes_at_unix {
            for (start, key) in [
                (opens_at_unix, "opens_at"),
                (prequeue_at_unix, "prequeue_at"),
            ] {
                if let Some(start) = start.filter(|&s| close <= s) {
                    self.problems.push(self.loc.at(
                        closes_span.clone(),
                        format!("`closes_at` is not after `{key}` ({} s before it): the event would close before it opens", start - close),
                    ));
                    break;
                }
            }
        }
        EventTimes {
            prequeue_at_unix,
            opens_at_unix,
            closes_at_unix,
        }
    }

    /// `message`: one line of at most 280 characters; empty means none.
    pub(super) fn room_message(&mut self, value: Option<Spanned<String>>) -> Option<String> {
        let v = value?;
        let text = v.get_ref().trim();
        let chars = text.chars().count();
        if chars > MESSAGE_CHARS_MAX {
            self.problem(
                &v,
                format!("`message` is {chars} characters long, at most {MESSAGE_CHARS_MAX}"),
            );
            return None;
        }
        if text.chars().any(char::is_control) {
            self.problem(&v, "`message` must be one line without control characters");
            return None;
        }
        (!text.is_empty()).then(|| text.to_string())
    }

    /// `mode` and `standby_above_per_second`, which only standby takes and
    /// standby needs.
    pub(super) fn room_mode(
        &mut self,
        mode: Option<Spanned<String>>,
        above: Option<Spanned<i64>>,
    ) -> RoomMode {
        let standby = match &mode {
            None => false,
            Some(m) => match m.get_ref().as_str() {
                "queue" => false,
                "standby" => true,
                other => {
                    self.problem(
                        m,
                        format!("`mode` must be \"queue\" or \"standby\", got {other:?}"),
                    );
                    return RoomMode::Queue;
                }
            },
        };
        match (standby, above) {
            (false, None) => RoomMode::Queue,
            (false, Some(a)) => {
                self.problem(
                    &a,
                    "`standby_above_per_second` only applies to mode = \"standby\"",
                );
                RoomMode::Queue
            }
            (true, None) => {
                let span = mode.map(|m| m.span());
                self.problems.push(self.loc.at(
                    span,
                    "mode = \"standby\" needs `standby_above_per_second`: the arrival rate above which the line forms",
                ));
                RoomMode::Queue
            }
            (true, Some(a)) => {
                let n = self.int(Some(a), "standby_above_per_second", 1..=1_000_000, 1);
                RoomMode::Standby {
                    above_per_second: nz32(n),
                }
            }
        }
    }

    /// `pass_idle_s`: 0 (off, the default), or from 10 s to less than the
    /// pass's own lifetime.
    pub(super) fn pass_idle(
        &mut self,
        value: Option<Spanned<i64>>,
        pass_ttl_s: i64,
    ) -> Option<Duration> {
        let v = value?;
        let span = v.span();
        let s = self.int(Some(v), "pass_idle_s", 0..=DAY_S, 0);
        if s == 0 {
            return None;
        }
        if s < PASS_IDLE_MIN_S {
            self.problems.push(self.loc.at(
                Some(span),
                format!("`pass_idle_s` must be 0 (off) or at least {PASS_IDLE_MIN_S}, got {s}"),
            ));
            return None;
        }
        if s >= pass_ttl_s {
            self.problems.push(self.loc.at(
                Some(span),
                format!("`pass_idle_s` ({s}) must be less than `pass_ttl_s` ({pass_ttl_s}): a pass would expire before it counted as idle"),
            ));
            return None;
        }
        Some(Duration::from_secs(s as u64))
    }
}
