//! Ranking within a window (Flink's window Top-N): `ROW_NUMBER()`,
//! `RANK()` or `DENSE_RANK()` over the window's rows of a partition,
//! ordered by expressions of each row, keeping the rows ranked at most N.
//!
//! A window's [`TopRows`] accumulator holds only the rows that can still
//! be in its top N, sorted: adding a row inserts it at its place (after
//! rows that order equal, then by event time) and drops what falls beyond
//! N; two session windows' lists merge the same way. NULLs order first
//! ascending and last descending, as in Flink.

use crate::aggregate::Stored;
use crate::datum::Datum;
use crate::expr::{EvalError, Expr, Row, compare};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// How rows are numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// 1, 2, 3, ... (ties numbered by event time, then arrival).
    RowNumber,
    /// Ties share a rank; the next rank skips (1, 1, 3).
    Rank,
    /// Ties share a rank; the next rank follows (1, 1, 2).
    DenseRank,
}

impl Ranking {
    /// The SQL function.
    pub fn name(self) -> &'static str {
        match self {
            Ranking::RowNumber => "ROW_NUMBER",
            Ranking::Rank => "RANK",
            Ranking::DenseRank => "DENSE_RANK",
        }
    }
}

/// What a window keeps of its rows: the top `limit` by `order`.
#[derive(Debug, Clone)]
pub struct TopRows {
    /// How rows are numbered.
    pub ranking: Ranking,
    /// Rows ranked at most this are kept.
    pub limit: u64,
    /// The ordering expressions, each descending or not.
    pub order: Vec<(Expr, bool)>,
    /// What a kept row keeps: the values its output reads.
    pub values: Vec<Expr>,
}

/// One kept row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankedRow {
    /// Its ordering values (`None`: NULL).
    pub order: Vec<Option<Stored>>,
    /// Its event time.
    pub time: i64,
    /// The values its output reads.
    pub values: Vec<Option<Stored>>,
}

impl TopRows {
    /// Reads a record's row into a [`RankedRow`] (an error if an ordering
    /// value cannot be evaluated).
    pub fn row(&self, row: Row<'_>, time: i64) -> Result<RankedRow, EvalError> {
        let stored =
            |expr: &Expr| -> Result<Option<Stored>, EvalError> { Ok(Stored::of(&expr.eval(row)?)) };
        Ok(RankedRow {
            order: self
                .order
                .iter()
                .map(|(expr, _)| stored(expr))
                .collect::<Result<_, _>>()?,
            time,
            values: self.values.iter().map(stored).collect::<Result<_, _>>()?,
        })
    }

    /// How `a` and `b` order (by the ordering values; equal ones by event
    /// time). An error if two values do not compare (a string and a
    /// number).
    fn cmp_values(&self, a: &RankedRow, b: &RankedRow) -> Result<Ordering, EvalError> {
        for ((x, y), (_, descending)) in a.order.iter().zip(&b.order).zip(&self.order) {
            let order = match (x, y) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (Some(x), Some(y)) => compare(&x.datum(), &y.datum())?.unwrap_or(Ordering::Equal),
            };
            let order = if *descending { order.reverse() } else { order };
            if order != Ordering::Equal {
                return Ok(order);
            }
        }
        Ok(Ordering::Equal)
    }

    /// Whether `row` can be ranked among `rows` (its ordering values
    /// compare with theirs).
    pub fn check(&self, rows: &[RankedRow], row: &RankedRow) -> Result<(), EvalError> {
        match rows.first() {
            Some(first) => self.cmp_values(first, row).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Inserts `row` into the sorted `rows` and drops those ranked beyond
    /// the limit.
    pub fn insert(&self, rows: &mut Vec<RankedRow>, row: RankedRow) {
        let at = rows.partition_point(|kept| {
            match self.cmp_values(kept, &row).unwrap_or(Ordering::Equal) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => kept.time <= row.time,
            }
        });
        rows.insert(at, row);
        let keep = self.kept(rows);
        rows.truncate(keep);
    }

    /// How many of the sorted `rows` are ranked at most the limit.
    fn kept(&self, rows: &[RankedRow]) -> usize {
        let ranks = self.ranks(rows);
        ranks.iter().take_while(|rank| **rank <= self.limit).count()
    }

    /// The rank of each of the sorted `rows`.
    pub fn ranks(&self, rows: &[RankedRow]) -> Vec<u64> {
        let mut ranks = Vec::with_capacity(rows.len());
        let mut dense = 0u64;
        for (index, row) in rows.iter().enumerate() {
            let tied = index > 0
                && self.ranking != Ranking::RowNumber
                && self.cmp_values(&rows[index - 1], row).ok() == Some(Ordering::Equal);
            let rank = match (self.ranking, tied) {
                (Ranking::RowNumber, _) => index as u64 + 1,
                (_, true) => ranks[index - 1],
                (Ranking::Rank, false) => index as u64 + 1,
                (Ranking::DenseRank, false) => dense + 1,
            };
            if !tied {
                dense += 1;
            }
            ranks.push(rank);
        }
        ranks
    }

    /// The rows of two windows that merge (sessions).
    pub fn merge(&self, a: &[RankedRow], b: &[RankedRow]) -> Vec<RankedRow> {
        let mut merged = a.to_vec();
        for row in b {
            self.insert(&mut merged, row.clone());
        }
        merged
    }
}

impl RankedRow {
    /// Its kept values as datums.
    pub fn datums(&self) -> impl Iterator<Item = Datum<'_>> {
        self.values
            .iter()
            .map(|value| value.as_ref().map_or(Datum::Null, Stored::datum))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(ranking: Ranking, limit: u64) -> TopRows {
        TopRows {
            ranking,
            limit,
            order: vec![(Expr::Column(0), true)],
            values: vec![Expr::Column(1)],
        }
    }

    fn row(price: Option<i64>, time: i64, id: i64) -> RankedRow {
        RankedRow {
            order: vec![price.map(Stored::Int)],
            time,
            values: vec![Some(Stored::Int(id))],
        }
    }

    fn ids(rows: &[RankedRow]) -> Vec<i64> {
        rows.iter()
            .map(|r| match r.values[0] {
                Some(Stored::Int(id)) => id,
                _ => -1,
            })
            .collect()
    }

    #[test]
    fn each_ranking_keeps_its_top_and_ties_follow_event_time() {
        let input = [
            row(Some(5), 3, 1),
            row(Some(9), 2, 2),
            row(None, 1, 3),
            row(Some(9), 1, 4),
            row(Some(7), 4, 5),
            row(Some(5), 0, 6),
        ];
        let expect = [
            (Ranking::RowNumber, 2, vec![4, 2], vec![1, 2]),
            (Ranking::Rank, 1, vec![4, 2], vec![1, 1]),
            (Ranking::Rank, 2, vec![4, 2], vec![1, 1]),
            (Ranking::Rank, 3, vec![4, 2, 5], vec![1, 1, 3]),
            (Ranking::DenseRank, 2, vec![4, 2, 5], vec![1, 1, 2]),
            (
                Ranking::DenseRank,
                3,
                vec![4, 2, 5, 6, 1],
                vec![1, 1, 2, 3, 3],
            ),
            (
                Ranking::RowNumber,
                10,
                vec![4, 2, 5, 6, 1, 3],
                vec![1, 2, 3, 4, 5, 6],
            ),
        ];
        for (ranking, limit, kept, ranks) in expect {
            let top = top(ranking, limit);
            let mut rows = Vec::new();
            for r in &input {
                top.insert(&mut rows, r.clone());
            }
            assert_eq!(ids(&rows), kept, "{ranking:?} {limit}");
            assert_eq!(top.ranks(&rows), ranks, "{ranking:?} {limit}");
            // Split in two and merged, the same.
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for (i, r) in input.iter().enumerate() {
                top.insert(if i % 2 == 0 { &mut a } else { &mut b }, r.clone());
            }
            assert_eq!(ids(&top.merge(&a, &b)), kept, "{ranking:?} {limit} merged");
        }
    }

    #[test]
    fn values_that_do_not_compare_are_refused_before_insertion() {
        let top = top(Ranking::RowNumber, 3);
        let mut rows = Vec::new();
        top.insert(&mut rows, row(Some(1), 0, 1));
        let text = RankedRow {
            order: vec![Some(Stored::Str("x".into()))],
            time: 0,
            values: vec![None],
        };
        assert!(top.check(&rows, &text).is_err());
    }
}
