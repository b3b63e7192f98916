//! Plain data below every judge and reader: what preparation learned (`prepared`), what doctor
//! and import find (`setup`), the observed pieces the checks judge (`observed`), what AWS
//! records (`records`: CloudTrail's events, CloudWatch's metrics), and the vocabulary of results
//! (`finding`). Imports nothing above it.

pub mod finding;
pub mod observed;
pub mod prepared;
pub mod records;
pub mod setup;
