//! A payment's basket: its lines, and whether they add up to the amount charged.
use crate::domain::payments::Pay;

use crate::domain::credentials::scope::Acting;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct BasketLine {
    pub sku: String,
    pub quantity: f64,
    pub unit_price_minor: i64,
    pub extended_price_minor: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount_minor: Option<i64>,
}

/// What the basket says about the amount: its total, whether it disagrees with the debit
/// (the payment is then flagged for reconciliation, never adjusted), and how complete the
/// partner's data was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasketCheck {
    pub total_minor: Option<i64>,
    pub diverges: bool,
    pub completeness: i32,
}

pub fn check_basket(pay: &Pay, acting: &Acting) -> BasketCheck {
    let mut score = 40;
    if pay.order_ref.is_some() {
        score += 10;
    }
    if acting.branch_id.is_some() {
        score += 5;
    }
    if acting.terminal_id.is_some() {
        score += 5;
    }
    let Some(lines) = pay.basket.as_ref().filter(|l| !l.is_empty()) else {
        return BasketCheck {
            total_minor: None,
            diverges: false,
            completeness: score,
        };
    };
    score += 25;
    if lines.iter().all(|l| l.category.is_some()) {
        score += 15;
    }
    let total: i64 = lines
        .iter()
        .map(|l| l.extended_price_minor - l.discount_minor.unwrap_or(0))
        .sum();
    let lines_disagree = lines.iter().any(|l| {
        let expected = l.quantity * l.unit_price_minor as f64;
        (expected - l.extended_price_minor as f64).abs() >= 1.0
    });
    BasketCheck {
        total_minor: Some(total),
        diverges: total != pay.amount_minor || lines_disagree,
        completeness: score,
    }
}
