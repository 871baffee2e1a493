//! What a payment does before its transaction opens: a short code is refused while its
//! integration is over the failed-guess cap (`guessing`); an OTP is checked against its
//! session (a wrong code counted in a transaction of its own) and the wallet's turn is
//! taken on this replica, so the wallet's payments queue here rather than on its row lock.
use std::{sync::Arc, time::Duration};

use uuid::Uuid;

use crate::domain::payments::{
    otp::verify_otp,
    pay::{Credential, Pay},
};
use crate::{
    domain::{credentials::guessing::Guard, sandbox::clock::Clock},
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
    /// Admits `pay` of `merchant` (of `integration`) at the caller's `clock`; the wallet's
    /// turn, for an OTP payment, to hold until its transaction ends.
    pub async fn admit(
        &self,
        merchant: Uuid,
        integration: Uuid,
        pay: &Pay,
        clock: Clock,
    ) -> Result<Option<MyTurn>, ApiError> {
        let short_code = matches!(pay.credential, Credential::ShortCode { .. });
        self.guard.before_trying(integration, short_code).await?;
        if !matches!(pay.credential, Credential::Otp { .. }) {
            return Ok(None);
        }
        match verify_otp(self.db, self.sealer, merchant, pay, clock).await? {
            Some(wallet) => Ok(Some(self.wallet_queue.take(wallet, self.lock_wait).await?)),
            None => Ok(None),
        }
    }
}
