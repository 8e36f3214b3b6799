//! The status line on stderr while a run lasts: redrawn in place on a
//! terminal, one line every few seconds otherwise (CI logs).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use super::record::Recorder;

pub const REDRAW_EVERY: Duration = Duration::from_millis(500);
/// Without a terminal, one line per this many redraws.
pub const LOG_EVERY_REDRAWS: u32 = 10;

/// The status text now.
pub fn line(name: &str, planned: usize, rec: &Recorder) -> String {
    let t = rec.now_s();
    rec.with(|i| {
        let last = i.samples.last();
        let errors: u64 = i
            .responses
            .iter()
            // 503 is a deliberate refusal (paused, queue full), not an error.
            .filter(|((_, s), _)| *s == 0 || (*s >= 500 && *s != 503))
            .map(|(_, n)| n)
            .sum();
        format!(
            "[{name}] {t:5.1}s shoppers {}/{planned} done {} · waiting {} · admitted {} · orders {} · errors {}",
            i.shoppers_started,
            i.shoppers_done,
            last.map_or(0, |s| s.waiting),
            i.waits_s.len(),
            i.orders.len(),
            errors,
        )
    })
}

/// Redraws until `stop` fires, then ends the line.
pub async fn run(
    name: String,
    planned: usize,
    rec: Arc<Recorder>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let tty = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(REDRAW_EVERY);
    let mut n = 0u32;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        n += 1;
        let text = line(&name, planned, &rec);
        let mut err = std::io::stderr().lock();
        if tty {
            let _ = write!(err, "\r{text}\x1b[K");
        } else if n.is_multiple_of(LOG_EVERY_REDRAWS) {
            let _ = writeln!(err, "{text}");
        }
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "{}{}",
        if tty { "\r" } else { "" },
        line(&name, planned, &rec)
    );
}
