//! Policy documents: parse, canonical form and diff (`doc`), and what a document allows and
//! names (`analysis`). Pure; below every judge.

pub mod analysis;
pub mod doc;
