//! Authored paths built on the stack while walking a document, turned into
//! a [`Path`] only when a finding is reported, so a clean walk allocates no
//! paths.

use crate::diagnostic::{Path, PathSegment};

/// A path as a chain of borrowed segments.
#[derive(Debug)]
pub(crate) enum Lp<'a> {
    /// An owned path to start from.
    Base(&'a Path),
    /// A mapping key below a parent.
    Key(&'a Lp<'a>, &'a str),
    /// A sequence index below a parent.
    Index(&'a Lp<'a>, usize),
}

impl<'a> Lp<'a> {
    /// This path extended by a key.
    pub(crate) fn key(&'a self, key: &'a str) -> Self {
        Self::Key(self, key)
    }

    /// This path extended by an index.
    pub(crate) fn index(&'a self, index: usize) -> Self {
        Self::Index(self, index)
    }

    /// The owned path.
    pub(crate) fn to_path(&self) -> Path {
        let mut rev = Vec::new();
        let mut cur = self;
        let base = loop {
            match cur {
                Lp::Base(p) => break *p,
                Lp::Key(parent, k) => {
                    rev.push(PathSegment::Key((*k).to_owned()));
                    cur = parent;
                }
                Lp::Index(parent, i) => {
                    rev.push(PathSegment::Index(*i));
                    cur = parent;
                }
            }
        };
        let mut segs = base.0.clone();
        segs.extend(rev.into_iter().rev());
        Path(segs)
    }
}
