//! `release_per_second = "adaptive"` and its `[rooms.adaptive]` table.

use std::ops::Range;

use toml::Spanned;

use super::{nz32, Validator};
use crate::file::AdaptiveFile;
use crate::model::{Adaptive, ReleaseSource};

/// `max_error_ratio` when the table leaves it out.
pub const MAX_ERROR_RATIO_DEFAULT: f64 = 0.02;
/// `min_per_second` when the table leaves it out.
pub const MIN_PER_SECOND_DEFAULT: i64 = 1;

impl Validator<'_> {
    /// The adaptive release of a room whose `release_per_second` (at
    /// `span`) is `"adaptive"`: its bounds, and the rate it starts at, the
    /// geometric middle of the bounds.
    pub(super) fn adaptive(
        &mut self,
        table: Option<Spanned<AdaptiveFile>>,
        span: Range<usize>,
    ) -> (i64, ReleaseSource) {
        let Some(table) = table else {
            self.problems.push(self.loc.at(
                Some(span),
                "release_per_second = \"adaptive\" needs a [rooms.adaptive] table with at least `target_p99_ms` and `max_per_second`",
            ));
            return (1, ReleaseSource::Fixed);
        };
        let table_span = table.span();
        let a = table.into_inner();
        for (missing, key) in [
            (a.target_p99_ms.is_none(), "target_p99_ms"),
            (a.max_per_second.is_none(), "max_per_second"),
        ] {
            if missing {
                self.problems.push(self.loc.at(
                    Some(table_span.clone()),
                    format!("[rooms.adaptive] needs `{key}`"),
                ));
            }
        }
        let target = self.int(a.target_p99_ms, "target_p99_ms", 1..=600_000, 1000);
        let max_error_ratio = match a.max_error_ratio {
            None => MAX_ERROR_RATIO_DEFAULT,
            Some(v) if *v.get_ref() > 0.0 && *v.get_ref() < 1.0 => *v.get_ref(),
            Some(v) => {
                self.problem(
                    &v,
                    format!(
                        "`max_error_ratio` must be above 0 and below 1, got {}",
                        v.get_ref()
                    ),
                );
                MAX_ERROR_RATIO_DEFAULT
            }
        };
        let max_span = a.max_per_second.as_ref().map(|m| m.span());
        let min = self.int(
            a.min_per_second,
            "min_per_second",
            1..=1_000_000,
            MIN_PER_SECOND_DEFAULT,
        );
        let max = self.int(a.max_per_second, "max_per_second", 1..=1_000_000, min);
        if max < min {
            self.problems.push(self.loc.at(
                max_span,
                format!("`max_per_second` ({max}) must be at least `min_per_second` ({min})"),
            ));
        }
        let max = max.max(min);
        let start = ((min as f64 * max as f64).sqrt().round() as i64).clamp(min, max);
        (
            start,
            ReleaseSource::Adaptive(Adaptive {
                target_p99_ms: target as u32,
                max_error_ratio,
                min_per_second: nz32(min),
                max_per_second: nz32(max),
            }),
        )
    }
}
