//! Pagination and sorting shared by every list call.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Sort direction. Agno sorts descending unless `asc` is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SortOrder {
    /// Smallest first.
    Asc,
    /// Largest first (the default).
    #[default]
    Desc,
}

/// `limit`/`page` of a list call. Pages are 1-indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pagination {
    /// At most this many rows; `None` returns every row.
    pub limit: Option<u64>,
    /// 1-indexed page of `limit` rows; requires `limit`.
    pub page: Option<u64>,
}

impl Pagination {
    /// The first `limit` rows.
    pub fn limit(limit: u64) -> Self {
        Pagination {
            limit: Some(limit),
            page: None,
        }
    }

    /// Page `page` (1-indexed) of `limit` rows.
    pub fn page(limit: u64, page: u64) -> Self {
        Pagination {
            limit: Some(limit),
            page: Some(page),
        }
    }

    /// Checks the agno 3 rules: `page` without `limit`, or `page < 1`, is an error.
    pub fn validate(&self) -> Result<()> {
        match (self.limit, self.page) {
            (None, Some(_)) => Err(Error::invalid_input(
                "`page` was provided without `limit`. Pass both to paginate, or neither to fetch all rows. \
                 Silently returning everything on a paginated call hides caller bugs and surfaces wrong data.",
            )),
            (_, Some(page)) if page < 1 => Err(Error::invalid_input(format!(
                "`page` must be >= 1 (pages are 1-indexed); got {page}."
            ))),
            _ => Ok(()),
        }
    }

    /// Rows to skip before the page starts (after [`Pagination::validate`]).
    pub fn offset(&self) -> u64 {
        match (self.limit, self.page) {
            (Some(limit), Some(page)) => limit.saturating_mul(page.saturating_sub(1)),
            _ => 0,
        }
    }

    /// Validates, then cuts the page out of already sorted, filtered rows.
    pub fn apply<T>(&self, rows: Vec<T>) -> Result<Vec<T>> {
        self.validate()?;
        let offset = usize::try_from(self.offset()).unwrap_or(usize::MAX);
        let iter = rows.into_iter().skip(offset);
        Ok(match self.limit {
            Some(limit) => iter
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .collect(),
            None => iter.collect(),
        })
    }
}

/// One page of rows plus the number of rows that matched before paging.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The rows of this page.
    pub items: Vec<T>,
    /// How many rows matched the filters in total.
    pub total: u64,
    /// Rows the call selected but could not decode (stored JSON this code cannot
    /// represent, such as a lone surrogate, or malformed text): named here instead of
    /// failing the whole call, so one bad row never hides its neighbours. SQL stores name
    /// those in the page's place; stores that filter in memory name every one the query's
    /// index reached that the caller may see. Always empty where no such row can be stored.
    pub unreadable: Vec<Unreadable>,
}

/// A stored row a list call matched but could not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The row's id (a run id, for runs).
    pub id: String,
    /// Why it could not be decoded.
    pub error: String,
}

impl<T> Page<T> {
    /// The page `items` of `total` matching rows, all readable.
    pub fn new(items: Vec<T>, total: u64) -> Self {
        Page {
            items,
            total,
            unreadable: Vec::new(),
        }
    }

    /// The page of `total` matching rows from decode results keyed by row id: decoded rows
    /// become `items`, failed ones [`Page::unreadable`].
    pub fn from_decoded(rows: impl IntoIterator<Item = (String, Result<T>)>, total: u64) -> Self {
        let mut page = Page::new(Vec::new(), total);
        for (id, row) in rows {
            match row {
                Ok(item) => page.items.push(item),
                Err(e) => page.unreadable.push(Unreadable {
                    id,
                    error: e.to_string(),
                }),
            }
        }
        page
    }

    /// Sorts nothing: counts `rows`, then applies `pagination`.
    pub fn paginate(rows: Vec<T>, pagination: &Pagination) -> Result<Page<T>> {
        let total = rows.len() as u64;
        Ok(Page::new(pagination.apply(rows)?, total))
    }
}

impl<T: Serialize> Page<T> {
    /// Sorts `rows` with [`sort_records`] (an unknown column is `InvalidInput`), then pages
    /// them with [`Page::paginate`].
    pub fn sorted(
        mut rows: Vec<T>,
        sort: &Sort,
        allowed: &[&str],
        pagination: &Pagination,
    ) -> Result<Page<T>> {
        sort_records(&mut rows, sort, allowed)?;
        Page::paginate(rows, pagination)
    }
}

/// Sorting of a list call: a column name and a direction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sort {
    /// Column to sort by; `None` keeps the call's default order.
    pub sort_by: Option<String>,
    /// Direction; descending unless `Asc`.
    pub sort_order: SortOrder,
}

impl Sort {
    /// Sort by `column` in `order`.
    pub fn by(column: impl Into<String>, order: SortOrder) -> Self {
        Sort {
            sort_by: Some(column.into()),
            sort_order: order,
        }
    }
}

/// Orders JSON values: null, booleans, numbers, strings, then anything else by its text.
pub fn compare_json(a: &serde_json::Value, b: &serde_json::Value) -> std::cmp::Ordering {
    use serde_json::Value;
    use std::cmp::Ordering;
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            _ => 4,
        }
    }
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => x
                .as_f64()
                .unwrap_or_default()
                .partial_cmp(&y.as_f64().unwrap_or_default())
                .unwrap_or(Ordering::Equal),
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ if rank(a) != rank(b) => rank(a).cmp(&rank(b)),
        _ => a.to_string().cmp(&b.to_string()),
    }
}

/// Sorts records in memory by `sort.sort_by` (a serialized field name) as agno's
/// `apply_sorting` does: `updated_at` falls back to `created_at`, descending unless `Asc`.
/// Leaves the order alone when no column is given; an unknown column is `InvalidInput`.
pub fn sort_records<T: Serialize>(rows: &mut [T], sort: &Sort, allowed: &[&str]) -> Result<()> {
    crate::validate_sort(sort, allowed)?;
    let Some(column) = &sort.sort_by else {
        return Ok(());
    };
    let key = |row: &T| -> serde_json::Value {
        let doc = serde_json::to_value(row).unwrap_or_default();
        match doc.get(column.as_str()) {
            Some(serde_json::Value::Null) | None if column == "updated_at" => {
                doc.get("created_at").cloned().unwrap_or_default()
            }
            Some(v) => v.clone(),
            None => serde_json::Value::Null,
        }
    };
    let mut keyed: Vec<(serde_json::Value, usize)> =
        rows.iter().enumerate().map(|(i, r)| (key(r), i)).collect();
    keyed.sort_by(|(a, _), (b, _)| match sort.sort_order {
        SortOrder::Asc => compare_json(a, b),
        SortOrder::Desc => compare_json(b, a),
    });
    let order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    apply_permutation(rows, order);
    Ok(())
}

fn apply_permutation<T>(rows: &mut [T], order: Vec<usize>) {
    // position[i] = where the element now at i must go
    let mut position = vec![0; order.len()];
    for (dest, src) in order.into_iter().enumerate() {
        position[src] = dest;
    }
    for i in 0..rows.len() {
        while position[i] != i {
            let j = position[i];
            rows.swap(i, j);
            position.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_without_limit_is_rejected() {
        let err = Pagination {
            limit: None,
            page: Some(1),
        }
        .validate()
        .unwrap_err();
        assert!(err.message().contains("without `limit`"));
    }

    #[test]
    fn page_zero_is_rejected() {
        let err = Pagination::page(10, 0).validate().unwrap_err();
        assert!(err.message().ends_with("got 0."));
    }

    #[test]
    fn sorts_by_serialized_column() {
        #[derive(Serialize)]
        struct Row {
            name: &'static str,
            created_at: i64,
            updated_at: Option<i64>,
        }
        let mut rows = vec![
            Row {
                name: "b",
                created_at: 5,
                updated_at: None,
            },
            Row {
                name: "a",
                created_at: 1,
                updated_at: Some(9),
            },
            Row {
                name: "c",
                created_at: 3,
                updated_at: Some(4),
            },
        ];
        sort_records(
            &mut rows,
            &Sort::by("updated_at", SortOrder::Desc),
            &["name", "updated_at"],
        )
        .unwrap();
        assert_eq!(rows.iter().map(|r| r.name).collect::<String>(), "abc");
        sort_records(&mut rows, &Sort::by("name", SortOrder::Asc), &["name"]).unwrap();
        assert_eq!(rows.iter().map(|r| r.name).collect::<String>(), "abc");
        assert!(sort_records(&mut rows, &Sort::by("nope", SortOrder::Asc), &["name"]).is_err());
    }

    #[test]
    fn pages_are_one_indexed() {
        let rows: Vec<u32> = (0..25).collect();
        assert_eq!(
            Pagination::page(10, 3).apply(rows.clone()).unwrap(),
            (20..25).collect::<Vec<_>>()
        );
        assert_eq!(Pagination::limit(2).apply(rows).unwrap(), vec![0, 1]);
    }
}
