//! Standby (`mode = "standby"`): no line while arrivals stay at or under
//! `standby_above_per_second`; above it the line forms, and the room goes
//! back to standby only once the line has drained (nobody waiting), so
//! shoppers already in line are never overtaken by newcomers admitted at
//! once.
//!
//! [`standby_step`] moves the one bit of state (is the line forming?) and
//! [`admits_at_once`] says whether a join is admitted on the spot; a fleet
//! keeps the bit in Redis and asks the same functions with the fleet's
//! numbers.

/// Whether the line is forming after this step: it starts forming when
/// arrivals go above `above_per_second`, and stops only when it is not
/// above it and nobody waits.
pub fn standby_step(
    forming: bool,
    arrivals_per_second: f64,
    above_per_second: u32,
    waiting: u64,
) -> bool {
    let flood = arrivals_per_second > f64::from(above_per_second);
    if flood {
        return true;
    }
    forming && waiting > 0
}

/// Whether a join is admitted at once: standby in force (the line not
/// forming), the room open (never before `opens_at`), and a slot free
/// under `max_active`. Otherwise it waits in line as in queue mode.
pub fn admits_at_once(forming: bool, opened: bool, active: u64, max_active: u64) -> bool {
    !forming && opened && active < max_active
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_forms_above_the_threshold_and_goes_only_when_drained() {
        let mut forming = false;
        forming = standby_step(forming, 80.0, 100, 0);
        assert!(!forming);
        assert!(admits_at_once(forming, true, 10, 500));
        forming = standby_step(forming, 100.5, 100, 0);
        assert!(forming, "above the threshold the line forms");
        assert!(!admits_at_once(forming, true, 10, 500));
        forming = standby_step(forming, 20.0, 100, 35);
        assert!(forming, "calm again, but 35 still wait");
        forming = standby_step(forming, 20.0, 100, 0);
        assert!(!forming, "drained: standby again");
        forming = standby_step(forming, f64::NAN, 100, 5);
        assert!(!forming, "an unmeasured rate is no flood");
    }

    #[test]
    fn standby_stays_within_max_active_and_after_the_opening() {
        assert!(!admits_at_once(false, true, 500, 500));
        assert!(!admits_at_once(false, false, 0, 500));
        assert!(admits_at_once(false, true, 499, 500));
    }
}
