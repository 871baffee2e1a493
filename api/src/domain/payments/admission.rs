//! What a payment does before its transaction opens: a short code is refused while
//! the caller's terminal, branch or merchant has too many failed credentials (`guessing`); an OTP is checked against its
//! session (a wrong code counted in a transaction of its own) and the wallet's turn is
//! taken on this replica, so the wallet's payments queue here rather than on its row lock.
use std::{sync::Arc, time::Duration};

use crate::domain::payments::{
    otp::verify_otp,
    pay::{Admitted, Credential, Pay},
};
use crate::{
    domain::{credentials::guessing::Guard, risk::failures::Till, sandbox::clock::Clock},
    error::ApiError,
    infra::{
        crypto::Sealer,
        wallet_queue::{MyTurn, WalletQueue},
    },
    store::Db,
};

pub struct Admission<'a> {
    pub db: &'a Db,
    pub sealer: &'a Sealer,
    pub guard: Guard<'a>,
    pub wallet_queue: &'a Arc<WalletQueue>,
    /// How long a payment waits for its wallet's turn.
    pub lock_wait: Duration,
}

impl Admission<'_> {
    /// Admits `pay` at `till` at the caller's `clock`.
    pub async fn admit(
        &self,
        till: &Till,
        pay: &Pay,
        clock: Clock,
    ) -> Result<Admitted<MyTurn>, ApiError> {
        self.guard
            .before_trying(till, pay.credential.entry())
            .await?;
        if !matches!(pay.credential, Credential::Otp { .. }) {
            return Ok(Admitted::default());
        }
        match verify_otp(self.db, self.sealer, till.merchant_id, pay, clock).await? {
            Some(otp) => Ok(Admitted {
                turn: Some(
                    self.wallet_queue
                        .take(otp.wallet_id, self.lock_wait)
                        .await?,
                ),
                otp: Some(otp),
            }),
            None => Ok(Admitted::default()),
        }
    }
}
