//! The in-process store against a naive model, under random operations.

use proptest::prelude::*;
use sluice_admission::store::{MemoryStore, QueueStore, Slot, SlotState};

#[derive(Debug, Clone)]
enum Op {
    Push(bool),
    End(u16, u8),
    Trim(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => any::<bool>().prop_map(Op::Push),
        3 => (any::<u16>(), 0u8..3).prop_map(|(i, s)| Op::End(i, s)),
        1 => any::<u16>().prop_map(Op::Trim),
    ]
}

proptest! {
    #[test]
    fn live_counts_match_a_walk(ops in proptest::collection::vec(op(), 1..3000)) {
        let mut store = MemoryStore::new(2500);
        // The model: every place ever pushed, and where the front is.
        let mut model: Vec<SlotState> = Vec::new();
        let mut start = 0u64;
        for op in ops {
            match op {
                Op::Push(live) => {
                    let state = if live { SlotState::Waiting } else { SlotState::Abandoned };
                    let got = store.push(Slot { state, ..Slot::waiting(0, 2) });
                    if (model.len() as u64 - start) < 2500 {
                        prop_assert_eq!(got, Some(model.len() as u64));
                        model.push(state);
                    } else {
                        prop_assert_eq!(got, None);
                    }
                }
                Op::End(i, s) => {
                    if model.len() as u64 > start {
                        let place = start + u64::from(i) % (model.len() as u64 - start);
                        let next = [SlotState::Abandoned, SlotState::Expired, SlotState::Released][s as usize];
                        let slot = store.get(place).unwrap();
                        let ok = store.set(place, Slot { state: next, ..slot });
                        prop_assert_eq!(ok, model[place as usize].can_become(next));
                        if ok {
                            model[place as usize] = next;
                        }
                    }
                }
                Op::Trim(n) => {
                    let to = (start + u64::from(n) % 700).min(model.len() as u64);
                    store.trim_before(to, usize::MAX);
                    start = to;
                }
            }
            prop_assert_eq!(store.start(), start);
            prop_assert_eq!(store.end(), model.len() as u64);
        }
        let walk = |to: u64| (start..to).filter(|&p| model[p as usize] == SlotState::Waiting).count() as u64;
        prop_assert_eq!(store.live(), walk(model.len() as u64));
        for place in (start..=model.len() as u64).step_by(97).chain([model.len() as u64]) {
            prop_assert_eq!(store.live_before(place), walk(place), "place {}", place);
        }
    }
}
