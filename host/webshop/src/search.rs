//! Product search: Okapi BM25 over each product's lowercased Title, Description, first bullet
//! and option text, like WebShop's pyserini index (`search_engine/convert_product_file_format.py`,
//! `web_agent_site/engine/engine.py::get_top_n_product_from_keywords`).
//!
//! Deviation: tokens are maximal runs of ASCII letters and digits with no stemming and no
//! stopwords (Lucene's English analyzer stems and drops stopwords), so rankings are not
//! comparable with the real WebShop. Ties are broken by catalog order.

use crate::catalog::Catalog;

/// BM25 `k1` (Anserini default).
pub const K1: f64 = 0.9;
/// BM25 `b` (Anserini default).
pub const B: f64 = 0.4;
/// Most hits returned (`SEARCH_RETURN_N`).
pub const SEARCH_RETURN_N: usize = 50;

/// Lowercased alphanumeric tokens of `text`.
pub fn tokenize(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// A BM25 index over a catalog's products.
#[derive(Debug, Clone)]
pub struct SearchIndex {
    docs: Vec<Vec<String>>,
    avgdl: f64,
}

impl SearchIndex {
    /// Index every product of `catalog`, in catalog order.
    pub fn new(catalog: &Catalog) -> Self {
        let docs: Vec<Vec<String>> = catalog
            .products
            .iter()
            .map(|p| {
                let first_bullet = p.bullet_points.first().map(String::as_str).unwrap_or("");
                tokenize(&format!(
                    "{} {} {} {}",
                    p.name,
                    p.description,
                    first_bullet,
                    p.option_text()
                ))
            })
            .collect();
        let total: usize = docs.iter().map(Vec::len).sum();
        let avgdl = total as f64 / docs.len().max(1) as f64;
        Self { docs, avgdl }
    }

    /// Indices of the products matching `keywords` (joined with spaces and re-tokenised), best
    /// first, at most [`SEARCH_RETURN_N`]. Only products sharing at least one term are hits.
    pub fn search(&self, keywords: &[String]) -> Vec<usize> {
        let query = tokenize(&keywords.join(" "));
        let n = self.docs.len() as f64;
        let mut scored: Vec<(usize, f64)> = Vec::new();
        for (d, doc) in self.docs.iter().enumerate() {
            let dl = doc.len() as f64;
            let mut score = 0.0;
            let mut hit = false;
            for term in &query {
                let tf = doc.iter().filter(|t| *t == term).count() as f64;
                if tf == 0.0 {
                    continue;
                }
                hit = true;
                let df = self.docs.iter().filter(|d| d.contains(term)).count() as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                score += idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * dl / self.avgdl));
            }
            if hit {
                scored.push((d, score));
            }
        }
        // Stable sort keeps catalog order among equal scores.
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored
            .into_iter()
            .take(SEARCH_RETURN_N)
            .map(|(d, _)| d)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_terms_rank_matching_products_first() {
        let c = Catalog::embedded();
        let index = SearchIndex::new(&c);
        let hits = index.search(&["stainless".into(), "water".into(), "bottle".into()]);
        assert_eq!(c.products[hits[0]].asin, "B0WS000019");
        assert!(index.search(&["zzzz".into()]).is_empty());
    }

    #[test]
    fn equal_scores_keep_catalog_order() {
        let mut c = Catalog::embedded();
        // Two identical documents score equally; the earlier one in the catalog comes first.
        let mut twin = c.products[0].clone();
        twin.asin = "B0TWIN0000".into();
        c.products.insert(0, twin);
        let index = SearchIndex::new(&c);
        let hits = index.search(&["spandex".into()]);
        let pos = |d: usize| hits.iter().position(|&h| h == d).unwrap();
        assert_eq!(pos(1), pos(0) + 1);
    }
}
