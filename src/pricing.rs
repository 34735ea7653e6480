//! Money: what model calls cost.
//!
//! A [`Pricing`] table maps model names to [`ModelPrice`]s (US dollars per million tokens of
//! each kind); [`Pricing::cost`] turns a response's [`Usage`] into a [`Cost`]. Amounts are
//! [`Usd`], counted in whole picodollars (10⁻¹² USD) so that sums and budget checks never
//! round: a run's cost is exactly the sum of its calls' costs.
//!
//! A model the table does not know is never priced at zero: its calls are counted in
//! [`Cost::unpriced_calls`], and [`Cost::known`] is `None` ("no price known").

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, AddAssign};
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};

use crate::message::Usage;

/// Picodollars in one dollar.
const PICO: u64 = 1_000_000_000_000;

/// An amount of US dollars, exact to the picodollar (10⁻¹² USD); adding saturates.
///
/// ```
/// use agent_loop::pricing::Usd;
///
/// let price = Usd::from_dollars(0.0375);
/// assert_eq!(price.picodollars(), 37_500_000_000);
/// assert_eq!((price + price).to_string(), "$0.075000");
/// ```
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Usd(u64);

impl Usd {
    /// Nothing.
    pub const ZERO: Usd = Usd(0);

    /// An amount in picodollars.
    pub const fn from_picodollars(picodollars: u64) -> Usd {
        Usd(picodollars)
    }

    /// An amount in dollars, rounded to the picodollar; a negative or not-a-number amount is
    /// zero, one too large to hold is the most there is.
    pub fn from_dollars(dollars: f64) -> Usd {
        // A float-to-integer `as` saturates: negative amounts and NaN give 0, amounts past
        // the largest give u64::MAX.
        Usd((dollars * PICO as f64).round() as u64)
    }

    /// The amount in picodollars.
    pub const fn picodollars(self) -> u64 {
        self.0
    }

    /// The amount in dollars (as a float: for display and reports, not for sums).
    pub fn dollars(self) -> f64 {
        self.0 as f64 / PICO as f64
    }

    /// `self - other`, or zero when `other` is more.
    pub const fn saturating_sub(self, other: Usd) -> Usd {
        Usd(self.0.saturating_sub(other.0))
    }
}

impl Add for Usd {
    type Output = Usd;
    fn add(self, other: Usd) -> Usd {
        Usd(self.0.saturating_add(other.0))
    }
}

impl AddAssign for Usd {
    fn add_assign(&mut self, other: Usd) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Usd {
    fn sum<I: Iterator<Item = Usd>>(iter: I) -> Usd {
        iter.fold(Usd::ZERO, Add::add)
    }
}

impl fmt::Display for Usd {
    /// Dollars with six decimals (`$0.012345`); the exact amount is [`Usd::picodollars`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micro = self.0.saturating_add(500_000) / 1_000_000;
        write!(f, "${}.{:06}", micro / 1_000_000, micro % 1_000_000)
    }
}

/// What one model charges, in US dollars per million tokens of each kind.
///
/// ```
/// use agent_loop::{Usage};
/// use agent_loop::pricing::{ModelPrice, Usd};
///
/// // $3 input, $15 output, $3.75 cache writes, $0.30 cache reads per million tokens.
/// let price = ModelPrice::per_million(3.0, 15.0).cache(3.75, 0.30);
/// let usage = Usage { input_tokens: 1_000, output_tokens: 200, ..Usage::default() };
/// assert_eq!(price.cost(&usage), Usd::from_dollars(0.006));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelPrice {
    /// Uncached input tokens (`Usage::input_tokens`), per million.
    pub input: Usd,
    /// Output tokens, reasoning included (`Usage::output_tokens`), per million.
    pub output: Usd,
    /// Input tokens written to the prompt cache (`Usage::cache_creation_input_tokens`), per
    /// million: Anthropic's 5-minute cache write price.
    pub cache_write: Usd,
    /// Input tokens read from the prompt cache (`Usage::cache_read_input_tokens`), per million.
    pub cache_read: Usd,
}

impl ModelPrice {
    /// A price of `input` and `output` dollars per million tokens; cached tokens cost what
    /// input costs until [`cache`](Self::cache) says otherwise.
    pub fn per_million(input: f64, output: f64) -> ModelPrice {
        let input = Usd::from_dollars(input);
        ModelPrice {
            input,
            output: Usd::from_dollars(output),
            cache_write: input,
            cache_read: input,
        }
    }

    /// Sets the cache write and cache read prices, in dollars per million tokens.
    pub fn cache(mut self, write: f64, read: f64) -> ModelPrice {
        self.cache_write = Usd::from_dollars(write);
        self.cache_read = Usd::from_dollars(read);
        self
    }

    /// What `usage` costs at this price, exact to the picodollar (rounded down).
    pub fn cost(&self, usage: &Usage) -> Usd {
        let pico = [
            (usage.input_tokens, self.input),
            (usage.output_tokens, self.output),
            (usage.cache_creation_input_tokens, self.cache_write),
            (usage.cache_read_input_tokens, self.cache_read),
        ]
        .iter()
        .map(|&(tokens, per_million)| u128::from(tokens) * u128::from(per_million.0))
        .sum::<u128>()
            / 1_000_000;
        Usd(u64::try_from(pico).unwrap_or(u64::MAX))
    }

    /// The most a request can cost: `input_tokens` of prompt at the dearer of the input and
    /// cache-write prices (a prompt may be written to the cache), plus `max_output_tokens`
    /// at the output price. The agent checks a cost budget against it before each call.
    pub fn most(&self, input_tokens: u64, max_output_tokens: u64) -> Usd {
        let dearest = ModelPrice {
            input: self.input.max(self.cache_write),
            ..*self
        };
        dearest.cost(&Usage {
            input_tokens,
            output_tokens: max_output_tokens,
            ..Usage::default()
        })
    }
}

/// What model calls cost: the dollars of the calls whose model has a price, and how many calls
/// had none. An unknown model's call is never counted as free.
///
/// ```
/// use agent_loop::{Usage};
/// use agent_loop::pricing::{Cost, Pricing};
///
/// let usage = Usage { input_tokens: 1_000_000, output_tokens: 100_000, ..Usage::default() };
/// let known = Pricing::snapshot().cost("claude-sonnet-4-5-20250929", &usage);
/// assert_eq!(known.to_string(), "$4.500000");
/// let unknown = Pricing::snapshot().cost("my-local-model", &usage);
/// assert_eq!(unknown.known(), None);
/// assert_eq!(unknown.to_string(), "no price known");
/// assert_eq!((known + unknown).to_string(), "$4.500000 and 1 model call with no price known");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cost {
    /// The dollars of the priced calls.
    pub usd: Usd,
    /// Model calls whose model has no known price (their tokens are not in `usd`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unpriced_calls: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Cost {
    /// The cost of calls that all had a price.
    pub const fn priced(usd: Usd) -> Cost {
        Cost {
            usd,
            unpriced_calls: 0,
        }
    }

    /// The cost of one call whose model has no known price.
    pub const fn unpriced() -> Cost {
        Cost {
            usd: Usd::ZERO,
            unpriced_calls: 1,
        }
    }

    /// The whole cost, when every call had a price; `None` when some had none.
    pub fn known(&self) -> Option<Usd> {
        (self.unpriced_calls == 0).then_some(self.usd)
    }
}

impl Add for Cost {
    type Output = Cost;
    fn add(self, other: Cost) -> Cost {
        Cost {
            usd: self.usd + other.usd,
            unpriced_calls: self.unpriced_calls.saturating_add(other.unpriced_calls),
        }
    }
}

impl AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        *self = *self + other;
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.unpriced_calls {
            0 => write!(f, "{}", self.usd),
            _ if self.usd == Usd::ZERO => f.write_str("no price known"),
            1 => write!(f, "{} and 1 model call with no price known", self.usd),
            n => write!(f, "{} and {n} model calls with no price known", self.usd),
        }
    }
}

/// Prices per model: the crate's [`snapshot`](Self::snapshot) of Anthropic's, OpenAI's and
/// Google's published prices, or a table of your own, or the snapshot with your changes.
///
/// A model name matches its own entry, else the longest entry it starts with followed by
/// `-`, `@` or `:` (so `claude-sonnet-4-5-20250929` and `gpt-4o-2024-08-06` find
/// `claude-sonnet-4-5` and `gpt-4o`, and `gpt-4o-mini` finds its own entry); a
/// `provider/` prefix (`anthropic/claude-…`, as LiteLLM names models) is ignored, and so are
/// a Bedrock model id's inference profile and vendor (`us.anthropic.claude-…-v1:0`). A name
/// that matches nothing is tried once more with the dots of its version numbers as dashes,
/// as OpenRouter writes them (`anthropic/claude-sonnet-4.5` finds `claude-sonnet-4-5`).
///
/// ```
/// use agent_loop::pricing::{ModelPrice, Pricing};
///
/// let pricing = Pricing::snapshot()
///     .with("my-fine-tune", ModelPrice::per_million(4.0, 16.0))
///     .with("gpt-4o", ModelPrice::per_million(2.0, 8.0).cache(2.0, 1.0));
/// assert_eq!(pricing.price("gpt-4o-2024-08-06"), pricing.price("gpt-4o"));
/// assert!(pricing.price("my-fine-tune").is_some());
/// assert!(Pricing::empty().price("gpt-4o").is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pricing {
    prices: BTreeMap<String, ModelPrice>,
}

impl Pricing {
    /// The date the [`snapshot`](Self::snapshot)'s prices were taken.
    pub const SNAPSHOT_DATE: &'static str = "2026-12-04";

    /// Where the [`snapshot`](Self::snapshot)'s prices come from.
    pub const SNAPSHOT_SOURCES: &'static [&'static str] = &[
        "https://platform.claude.com/docs/en/about-claude/pricing",
        "https://platform.openai.com/docs/pricing",
        "https://ai.google.dev/gemini-api/docs/pricing",
    ];

    /// A table with no prices: every call is "no price known".
    pub fn empty() -> Pricing {
        Pricing::default()
    }

    /// The prices of current Anthropic, OpenAI and Gemini models as published on
    /// [`SNAPSHOT_DATE`](Self::SNAPSHOT_DATE) ([`SNAPSHOT_SOURCES`](Self::SNAPSHOT_SOURCES)):
    /// standard (not batch) prices, prompts within the models' standard context, Anthropic's
    /// 5-minute cache writes. Prices change: override what you pay with
    /// [`with`](Self::with).
    pub fn snapshot() -> Pricing {
        SNAPSHOT.as_ref().clone()
    }

    /// The snapshot, shared (what an agent uses unless told otherwise).
    pub(crate) fn shared_snapshot() -> Arc<Pricing> {
        SNAPSHOT.clone()
    }

    /// Sets (or replaces) a model's price.
    pub fn set(&mut self, model: impl Into<String>, price: ModelPrice) -> &mut Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// This table with a model's price set (or replaced).
    pub fn with(mut self, model: impl Into<String>, price: ModelPrice) -> Pricing {
        self.set(model, price);
        self
    }

    /// The models priced, with their prices, by name.
    pub fn models(&self) -> impl Iterator<Item = (&str, &ModelPrice)> {
        self.prices.iter().map(|(m, p)| (m.as_str(), p))
    }

    /// A model's price (see the type's docs for how names match).
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        self.lookup(model)
            .or_else(|| self.lookup(&versions_with_dashes(model)?))
    }

    fn lookup(&self, model: &str) -> Option<&ModelPrice> {
        let model = model.split_once('/').map_or(model, |(_, rest)| rest);
        if let Some(price) = self.prices.get(model) {
            return Some(price);
        }
        let model = without_bedrock_prefixes(model);
        if let Some(price) = self.prices.get(model) {
            return Some(price);
        }
        // The longest entry the name starts with, followed by a separator.
        let mut end = model.len();
        while let Some(cut) = model[..end].rfind(['-', '@', ':']) {
            if let Some(price) = self.prices.get(&model[..cut]) {
                return Some(price);
            }
            end = cut;
        }
        None
    }

    /// What `usage` of a call to `model` cost: priced, or one call with no price known.
    pub fn cost(&self, model: &str, usage: &Usage) -> Cost {
        match self.price(model) {
            Some(price) => Cost::priced(price.cost(usage)),
            None => Cost::unpriced(),
        }
    }
}

/// `model` with every `.` between two digits made a `-` (`claude-sonnet-4.5` →
/// `claude-sonnet-4-5`); `None` when it has none.
fn versions_with_dashes(model: &str) -> Option<String> {
    let bytes = model.as_bytes();
    let dotted = |i: usize| {
        bytes[i] == b'.'
            && i > 0
            && bytes[i - 1].is_ascii_digit()
            && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
    };
    if !(0..bytes.len()).any(dotted) {
        return None;
    }
    Some(
        model
            .char_indices()
            .map(|(i, c)| if dotted(i) { '-' } else { c })
            .collect(),
    )
}

/// A Bedrock model id without its cross-region inference profile (`us.`, `eu.`, `global.` …)
/// and its vendor (`anthropic.` …): `us.anthropic.claude-sonnet-4-5-20250929-v1:0` is
/// priced as `claude-sonnet-4-5`, which Bedrock bills at Anthropic's list prices. Any other
/// name is returned as it is (`gpt-4.1` has a dot, but no such prefix).
fn without_bedrock_prefixes(model: &str) -> &str {
    const REGIONS: &[&str] = &["us", "eu", "apac", "us-gov", "global", "jp", "au", "ca"];
    const VENDORS: &[&str] = &[
        "anthropic",
        "amazon",
        "meta",
        "mistral",
        "cohere",
        "ai21",
        "deepseek",
        "openai",
        "qwen",
        "writer",
    ];
    let mut rest = model;
    if let Some((region, after)) = rest.split_once('.') {
        if REGIONS.contains(&region) {
            rest = after;
        }
    }
    match rest.split_once('.') {
        Some((vendor, after)) if VENDORS.contains(&vendor) => after,
        _ => rest,
    }
}

static SNAPSHOT: LazyLock<Arc<Pricing>> = LazyLock::new(|| {
    // (model, input, output, 5-minute cache write, cache read), dollars per million tokens.
    const ANTHROPIC: &[(&str, f64, f64, f64, f64)] = &[
        ("claude-opus-5", 5.0, 25.0, 6.25, 0.50),
        ("claude-opus-4-8", 5.0, 25.0, 6.25, 0.50),
        ("claude-opus-4-7", 5.0, 25.0, 6.25, 0.50),
        ("claude-opus-4-6", 5.0, 25.0, 6.25, 0.50),
        ("claude-opus-4-5", 5.0, 25.0, 6.25, 0.50),
        ("claude-opus-4-1", 15.0, 75.0, 18.75, 1.50),
        ("claude-opus-4", 15.0, 75.0, 18.75, 1.50),
        ("claude-sonnet-4-6", 3.0, 15.0, 3.75, 0.30),
        ("claude-sonnet-4-5", 3.0, 15.0, 3.75, 0.30),
        ("claude-sonnet-4", 3.0, 15.0, 3.75, 0.30),
        ("claude-3-7-sonnet", 3.0, 15.0, 3.75, 0.30),
        ("claude-haiku-4-5", 1.0, 5.0, 1.25, 0.10),
        ("claude-3-5-haiku", 0.80, 4.0, 1.0, 0.08),
        ("claude-3-haiku", 0.25, 1.25, 0.30, 0.03),
    ];
    // (model, input, output, cached input), dollars per million tokens. OpenAI charges
    // nothing extra to write its cache.
    const OPENAI: &[(&str, f64, f64, f64)] = &[
        ("gpt-5", 1.25, 10.0, 0.125),
        ("gpt-5-mini", 0.25, 2.0, 0.025),
        ("gpt-5-nano", 0.05, 0.40, 0.005),
        ("gpt-4.1", 2.0, 8.0, 0.50),
        ("gpt-4.1-mini", 0.40, 1.60, 0.10),
        ("gpt-4.1-nano", 0.10, 0.40, 0.025),
        ("gpt-4o", 2.50, 10.0, 1.25),
        ("gpt-4o-mini", 0.15, 0.60, 0.075),
        ("o3", 2.0, 8.0, 0.50),
        ("o4-mini", 1.10, 4.40, 0.275),
        ("o3-mini", 1.10, 4.40, 0.55),
    ];
    // (model, input, output, cached input), dollars per million tokens, prompts up to 200k
    // tokens. Gemini's implicit cache has no write price (storage of explicit caches is billed
    // per hour, which no token count shows).
    const GOOGLE: &[(&str, f64, f64, f64)] = &[
        ("gemini-3-pro-preview", 2.0, 12.0, 0.20),
        ("gemini-2.5-pro", 1.25, 10.0, 0.125),
        ("gemini-2.5-flash", 0.30, 2.50, 0.03),
        ("gemini-2.5-flash-lite", 0.10, 0.40, 0.01),
        ("gemini-2.0-flash", 0.10, 0.40, 0.025),
    ];
    let mut pricing = Pricing::empty();
    for &(model, input, output, write, read) in ANTHROPIC {
        pricing.set(
            model,
            ModelPrice::per_million(input, output).cache(write, read),
        );
    }
    for &(model, input, output, cached) in OPENAI.iter().chain(GOOGLE) {
        pricing.set(
            model,
            ModelPrice::per_million(input, output).cache(input, cached),
        );
    }
    Arc::new(pricing)
});

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, write: u64, read: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_creation_input_tokens: write,
            cache_read_input_tokens: read,
            ..Usage::default()
        }
    }

    #[test]
    fn a_call_costs_each_kind_of_token_at_its_price() {
        let price = ModelPrice::per_million(3.0, 15.0).cache(3.75, 0.30);
        // 1,000 × $3 + 100 × $15 + 2,000 × $3.75 + 10,000 × $0.30, per million:
        // $0.003 + $0.0015 + $0.0075 + $0.003 = $0.015.
        assert_eq!(
            price.cost(&usage(1_000, 100, 2_000, 10_000)),
            Usd::from_dollars(0.015)
        );
        assert_eq!(price.cost(&usage(1, 0, 0, 0)).picodollars(), 3_000_000);
        assert_eq!(price.cost(&usage(0, 1, 0, 0)).picodollars(), 15_000_000);
        assert_eq!(price.cost(&usage(0, 0, 1, 0)).picodollars(), 3_750_000);
        assert_eq!(price.cost(&usage(0, 0, 0, 1)).picodollars(), 300_000);
        assert_eq!(price.cost(&Usage::default()), Usd::ZERO);
    }

    #[test]
    fn the_most_a_request_costs_prices_its_prompt_at_the_dearer_input_price() {
        let price = ModelPrice::per_million(3.0, 15.0).cache(3.75, 0.30);
        assert_eq!(price.most(1_000, 100), Usd::from_dollars(0.00375 + 0.0015));
        let openai = ModelPrice::per_million(2.0, 8.0).cache(2.0, 0.5);
        assert_eq!(openai.most(1_000, 0), Usd::from_dollars(0.002));
    }

    #[test]
    fn huge_usage_saturates_instead_of_wrapping() {
        let price = ModelPrice::per_million(1e6, 1e6);
        let cost = price.cost(&usage(u64::MAX, u64::MAX, u64::MAX, u64::MAX));
        assert_eq!(cost, Usd::from_picodollars(u64::MAX));
        assert_eq!(Usd::from_dollars(f64::INFINITY).picodollars(), u64::MAX);
        assert_eq!(Usd::from_dollars(-1.0), Usd::ZERO);
        assert_eq!(Usd::from_dollars(f64::NAN), Usd::ZERO);
        assert_eq!(Usd::from_picodollars(u64::MAX) + Usd(1), Usd(u64::MAX));
    }

    #[test]
    fn names_match_exactly_then_by_the_longest_dated_prefix() {
        let pricing = Pricing::empty()
            .with("gpt-4o", ModelPrice::per_million(2.5, 10.0))
            .with("gpt-4o-mini", ModelPrice::per_million(0.15, 0.6));
        let price = |m: &str| pricing.price(m).map(|p| p.output);
        assert_eq!(price("gpt-4o"), Some(Usd::from_dollars(10.0)));
        assert_eq!(price("gpt-4o-2024-08-06"), Some(Usd::from_dollars(10.0)));
        assert_eq!(price("gpt-4o-mini"), Some(Usd::from_dollars(0.6)));
        assert_eq!(
            price("gpt-4o-mini-2024-07-18"),
            Some(Usd::from_dollars(0.6))
        );
        assert_eq!(price("openai/gpt-4o-mini"), Some(Usd::from_dollars(0.6)));
        assert_eq!(price("gpt-4o@2024"), Some(Usd::from_dollars(10.0)));
        // A prefix that is not followed by a separator is another model.
        assert_eq!(price("gpt-4omni"), None);
        assert_eq!(price("gpt"), None);
        assert_eq!(price(""), None);
        assert_eq!(price("/"), None);
        assert_eq!(price("-"), None);
    }

    #[test]
    fn dotted_version_numbers_find_the_dashed_entry() {
        let pricing = Pricing::empty()
            .with("claude-sonnet-4-5", ModelPrice::per_million(3.0, 15.0))
            .with("gpt-4.1", ModelPrice::per_million(2.0, 8.0));
        let price = |m: &str| pricing.price(m).map(|p| p.output);
        let sonnet = Some(Usd::from_dollars(15.0));
        assert_eq!(price("anthropic/claude-sonnet-4.5"), sonnet);
        assert_eq!(price("claude-sonnet-4.5"), sonnet);
        assert_eq!(price("claude-sonnet-4.5-20250929"), sonnet);
        // An entry with dots is found as it is, and dashes are never made dots.
        assert_eq!(price("gpt-4.1"), Some(Usd::from_dollars(8.0)));
        assert_eq!(price("gpt-4-1"), None);
        assert_eq!(versions_with_dashes("a.b"), None);
        assert_eq!(versions_with_dashes(".5"), None);
        assert_eq!(versions_with_dashes("4."), None);
        assert_eq!(versions_with_dashes("v1.2.3").as_deref(), Some("v1-2-3"));
        assert_eq!(versions_with_dashes("é4.5").as_deref(), Some("é4-5"));
    }

    #[test]
    fn bedrock_ids_are_priced_without_their_profile_and_vendor() {
        let pricing = Pricing::empty()
            .with("claude-sonnet-4-5", ModelPrice::per_million(3.0, 15.0))
            .with("claude-3-haiku", ModelPrice::per_million(0.25, 1.25))
            .with("gpt-4.1", ModelPrice::per_million(2.0, 8.0))
            .with("us.custom", ModelPrice::per_million(1.0, 1.0));
        let price = |m: &str| pricing.price(m).map(|p| p.output);
        let sonnet = Some(Usd::from_dollars(15.0));
        assert_eq!(
            price("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            sonnet
        );
        assert_eq!(
            price("global.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            sonnet
        );
        assert_eq!(price("anthropic.claude-sonnet-4-5-20250929-v1:0"), sonnet);
        assert_eq!(
            price("arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            sonnet
        );
        assert_eq!(
            price("anthropic.claude-3-haiku-20240307-v1:0"),
            Some(Usd::from_dollars(1.25))
        );
        // Only a known profile or vendor is taken off: a dotted name stays whole.
        assert_eq!(price("gpt-4.1"), Some(Usd::from_dollars(8.0)));
        assert_eq!(price("us.custom"), Some(Usd::from_dollars(1.0)));
        assert_eq!(price("us.meta.llama3-3-70b-instruct-v1:0"), None);
        assert_eq!(price("xx.anthropic.claude-sonnet-4-5-v1:0"), None);
        assert_eq!(without_bedrock_prefixes("us.gpt-4.1"), "gpt-4.1");
        assert_eq!(without_bedrock_prefixes("eu."), "");
        assert_eq!(without_bedrock_prefixes("gpt-4.1"), "gpt-4.1");
    }

    #[test]
    fn the_snapshot_prices_current_models_and_its_dated_names() {
        let pricing = Pricing::snapshot();
        for model in [
            "claude-sonnet-4-5-20250929",
            "claude-opus-4-1-20250805",
            "claude-haiku-4-5",
            "gpt-5",
            "gpt-4.1-mini-2025-04-14",
            "o4-mini",
            "gemini-2.5-pro",
            "gemini-2.5-flash-lite",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        ] {
            assert!(pricing.price(model).is_some(), "{model}");
        }
        let flash = |m: &str| {
            pricing
                .price(m)
                .map(|p| (p.input, p.cache_write, p.cache_read))
        };
        assert_eq!(
            flash("gemini-2.5-flash"),
            Some((
                Usd::from_dollars(0.30),
                Usd::from_dollars(0.30),
                Usd::from_dollars(0.03)
            ))
        );
        assert_eq!(
            flash("gemini-2.5-flash-lite").map(|p| p.0),
            Some(Usd::from_dollars(0.10))
        );
        let opus41 = pricing.price("claude-opus-4-1-20250805").map(|p| p.input);
        assert_eq!(opus41, Some(Usd::from_dollars(15.0)));
        let opus45 = pricing.price("claude-opus-4-5-20251101").map(|p| p.input);
        assert_eq!(opus45, Some(Usd::from_dollars(5.0)));
        assert!(pricing.models().count() >= 20);
    }

    #[test]
    fn an_unknown_model_is_never_free() {
        let cost = Pricing::empty().cost("x", &usage(10, 10, 0, 0));
        assert_eq!(cost, Cost::unpriced());
        assert_eq!(cost.known(), None);
        let both = Cost::priced(Usd::from_dollars(1.0)) + cost + cost;
        assert_eq!(both.known(), None);
        assert_eq!(
            both.to_string(),
            "$1.000000 and 2 model calls with no price known"
        );
        assert_eq!(Cost::default().known(), Some(Usd::ZERO));
        assert_eq!(Cost::default().to_string(), "$0.000000");
    }

    #[test]
    fn amounts_add_in_place_and_serialize_as_picodollars() {
        let mut total = Usd::from_picodollars(5);
        total += Usd::from_picodollars(7);
        assert_eq!(total, Usd::from_picodollars(12));
        let mut cost = Cost::priced(total);
        cost += Cost::unpriced();
        assert_eq!(cost.unpriced_calls, 1);
        // Unpriced calls are left out of the serialized form when there are none.
        let json = serde_json::to_string(&Cost::priced(total)).unwrap();
        assert_eq!(json, r#"{"usd":12}"#);
        let json = serde_json::to_string(&cost).unwrap();
        assert_eq!(json, r#"{"usd":12,"unpriced_calls":1}"#);
        assert_eq!(serde_json::from_str::<Cost>(&json).unwrap(), cost);
        assert_eq!(
            serde_json::from_str::<Cost>(r#"{"usd":12}"#).unwrap(),
            Cost::priced(total)
        );
    }

    #[test]
    fn usd_displays_rounded_to_the_microdollar() {
        assert_eq!(Usd::from_picodollars(499_999).to_string(), "$0.000000");
        assert_eq!(Usd::from_picodollars(500_000).to_string(), "$0.000001");
        assert_eq!(Usd::from_dollars(12.5).to_string(), "$12.500000");
        assert_eq!(
            Usd::from_picodollars(u64::MAX).to_string(),
            "$18446744.073709"
        );
        assert_eq!(
            Usd::from_dollars(0.25).saturating_sub(Usd::from_dollars(1.0)),
            Usd::ZERO
        );
        assert_eq!(
            [Usd::from_dollars(0.1), Usd::from_dollars(0.2)]
                .into_iter()
                .sum::<Usd>(),
            Usd::from_dollars(0.3)
        );
    }
}
