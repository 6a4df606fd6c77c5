//! Maps between positions in a TOML file and the dotted paths of its fields,
//! so that every config error can name the file, line and field.

use std::ops::Range;

/// Every field of a TOML document with where it stands.
#[derive(Debug, Default, Clone)]
pub struct FieldMap {
    text: String,
    /// (path, span of key and value together)
    fields: Vec<(String, Range<usize>)>,
    /// Why the strict TOML parser refused the text (e.g. an integer beyond
    /// `i64`, which the lenient deserializer accepts), and where.
    refused: Option<(String, usize)>,
}

impl FieldMap {
    /// Indexes `text`; a document that does not parse yields an empty map
    /// (the parse error itself carries the position).
    pub fn new(text: &str) -> Self {
        let mut map = FieldMap {
            text: text.to_string(),
            fields: Vec::new(),
            refused: None,
        };
        match toml_edit::Document::parse(text) {
            Ok(document) => map.walk_table(document.as_table(), ""),
            Err(error) => {
                let offset = error.span().map_or(0, |span| span.start);
                map.refused = Some((error.message().trim().to_string(), offset));
            }
        }
        map
    }

    /// Why the text is not valid TOML, and the byte offset, if it is not.
    pub fn refused(&self) -> Option<(&str, usize)> {
        self.refused
            .as_ref()
            .map(|(message, offset)| (message.as_str(), *offset))
    }

    /// 1-based line and column of byte `offset`.
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |s| s.chars().count()) + 1;
        (line, column)
    }

    /// The innermost field whose key or value covers `offset`.
    pub fn field_at(&self, offset: usize) -> Option<&str> {
        self.fields
            .iter()
            .filter(|(_, span)| span.contains(&offset))
            .min_by_key(|(_, span)| span.len())
            .map(|(path, _)| path.as_str())
    }

    /// The file's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Where `path` (e.g. `operators[1].plugin`) stands, if present.
    pub fn span_of(&self, path: &str) -> Option<Range<usize>> {
        self.fields
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, span)| span.clone())
    }

    fn walk_table(&mut self, table: &toml_edit::Table, prefix: &str) {
        for (name, _) in table.iter() {
            if let Some((key, item)) = table.get_key_value(name) {
                let path = join(prefix, name);
                let span = merge(key.span(), item.span());
                self.walk_item(item, &path, span);
            }
        }
    }

    fn walk_inline(&mut self, table: &toml_edit::InlineTable, prefix: &str) {
        for (name, _) in table.iter() {
            if let (Some((key, _)), Some(value)) = (table.get_key_value(name), table.get(name)) {
                let path = join(prefix, name);
                let span = merge(key.span(), value.span());
                self.walk_value(value, &path, span);
            }
        }
    }

    fn walk_item(&mut self, item: &toml_edit::Item, path: &str, span: Option<Range<usize>>) {
        match item {
            toml_edit::Item::Table(table) => {
                self.record(path, span.or_else(|| table.span()));
                self.walk_table(table, path);
            }
            toml_edit::Item::ArrayOfTables(tables) => {
                self.record(path, span);
                for (index, table) in tables.iter().enumerate() {
                    let element = format!("{path}[{index}]");
                    self.record(&element, table.span());
                    self.walk_table(table, &element);
                }
            }
            toml_edit::Item::Value(value) => self.walk_value(value, path, span),
            toml_edit::Item::None => {}
        }
    }

    fn walk_value(&mut self, value: &toml_edit::Value, path: &str, span: Option<Range<usize>>) {
        self.record(path, span.or_else(|| value.span()));
        match value {
            toml_edit::Value::InlineTable(table) => self.walk_inline(table, path),
            toml_edit::Value::Array(array) => {
                for (index, element) in array.iter().enumerate() {
                    self.walk_value(element, &format!("{path}[{index}]"), element.span());
                }
            }
            _ => {}
        }
    }

    fn record(&mut self, path: &str, span: Option<Range<usize>>) {
        if let Some(span) = span {
            self.fields.push((path.to_string(), span));
        }
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

fn merge(a: Option<Range<usize>>, b: Option<Range<usize>>) -> Option<Range<usize>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.start.min(b.start)..a.end.max(b.end)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_fields_by_offset_and_by_path() {
        let text = "[pipeline]\nname = \"p\"\n\n[[operators]]\nname = \"a\"\nconfig = { x = 1 }\n\n[[operators]]\nplugin = \"b.wasm\"\n";
        let map = FieldMap::new(text);
        let span = map.span_of("operators[1].plugin").unwrap();
        assert_eq!(map.line_column(span.start), (9, 1));
        assert_eq!(map.field_at(span.start + 3), Some("operators[1].plugin"));
        let x = map.span_of("operators[0].config.x").unwrap();
        assert_eq!(map.line_column(x.start).0, 6);
        assert_eq!(
            map.field_at(text.find("\"p\"").unwrap()),
            Some("pipeline.name")
        );
    }
}
