//! `[[rooms.lanes]]`: lines inside a room, chosen by the `lane` claim of
//! the store's enqueue token. Each non-bypass lane takes a `share` of every
//! release; the default lane takes what they leave, so the shares may add
//! up to at most 1. A bypass lane is admitted at once and takes no share.

use toml::Spanned;

use super::Validator;
use crate::file::LaneFile;
use crate::model::{Lane, DEFAULT_LANE};

/// Most lanes a room may have (each is a metric label value).
pub const LANES_MAX: usize = 16;
/// Slack for shares written as decimals (`0.7 + 0.2 + 0.1`).
const SHARE_EPSILON: f64 = 1e-9;

fn lane_name_ok(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

impl Validator<'_> {
    pub(super) fn lanes(
        &mut self,
        lanes: Vec<Spanned<LaneFile>>,
        has_enqueue_keys: bool,
    ) -> Vec<Lane> {
        if let (Some(first), false) = (lanes.first(), has_enqueue_keys) {
            self.problem(
                &first.get_ref().name,
                "[[rooms.lanes]] needs [[rooms.enqueue.keys]]: a shopper is put in a lane by the `lane` claim of the store's enqueue token",
            );
        }
        if lanes.len() > LANES_MAX {
            self.problem(
                &lanes[LANES_MAX].get_ref().name,
                format!("a room has at most {LANES_MAX} lanes"),
            );
        }
        let mut out: Vec<Lane> = Vec::with_capacity(lanes.len().min(LANES_MAX));
        let mut total = 0.0;
        for lane in lanes.into_iter().take(LANES_MAX) {
            let l = lane.into_inner();
            let name = l.name.get_ref().clone();
            if !lane_name_ok(&name) {
                self.problem(
                    &l.name,
                    format!("a lane name must be 1 to 32 of a-z, 0-9, `-` or `_`, got {name:?}"),
                );
            } else if name == DEFAULT_LANE {
                self.problem(
                    &l.name,
                    format!("{DEFAULT_LANE:?} is the lane of shoppers whose token names none; pick another name"),
                );
            } else if out.iter().any(|o| o.name == name) {
                self.problem(&l.name, format!("lane {name:?} is defined twice"));
            }
            let bypass = l.bypass.is_some_and(Spanned::into_inner);
            let share = match (l.share, bypass) {
                (Some(s), true) => {
                    self.problem(
                        &s,
                        "a bypass lane takes no `share`: its shoppers are admitted at once",
                    );
                    0.0
                }
                (None, true) => 0.0,
                (None, false) => {
                    self.problem(
                        &l.name,
                        format!("lane {name:?} needs `share` (of the places each release gives, above 0 and at most 1) or `bypass = true`"),
                    );
                    0.0
                }
                (Some(s), false) => {
                    let v = *s.get_ref();
                    if !(v > 0.0 && v <= 1.0) {
                        self.problem(
                            &s,
                            format!("`share` must be above 0 and at most 1, got {v}"),
                        );
                        0.0
                    } else if total + v > 1.0 + SHARE_EPSILON {
                        self.problem(
                            &s,
                            format!(
                                "the lanes' shares add up to {:.3} with this one, more than 1",
                                total + v
                            ),
                        );
                        0.0
                    } else {
                        total += v;
                        v
                    }
                }
            };
            out.push(Lane {
                name,
                share,
                bypass,
            });
        }
        out
    }
}
