//! `gateway.deny_cidrs_file`: read and parsed at every load, so a bad line
//! is refused by `sluice check` and by a reload like any other problem,
//! reported at the deny file's `FILE:LINE`.

use std::path::PathBuf;

use toml::Spanned;

use super::Validator;
use crate::deny_list::{self, DenyFileError};
use crate::diagnostic::Diagnostic;
use crate::model::DenyCidrs;

impl Validator<'_> {
    pub(super) fn deny_cidrs(&mut self, value: Option<Spanned<String>>) -> Option<DenyCidrs> {
        let v = value?;
        if v.get_ref().trim().is_empty() {
            self.problem(&v, "`deny_cidrs_file` must name a file");
            return None;
        }
        let path = PathBuf::from(v.get_ref());
        match deny_list::load(&path) {
            Ok(list) => Some(DenyCidrs { path, list }),
            Err(DenyFileError::Unreadable { message, .. }) => {
                self.problem(
                    &v,
                    format!("`deny_cidrs_file` {:?}: {message}", v.get_ref()),
                );
                None
            }
            Err(DenyFileError::BadLines { file, lines }) => {
                for line in lines {
                    self.problems.push(Diagnostic {
                        file: file.clone(),
                        line: line.line,
                        col: 1,
                        message: line.message,
                    });
                }
                None
            }
        }
    }
}
