//! STS reads: who the credentials are (GetCallerIdentity), its errors as the SDK gives them
//! (the caller tells "no answer" from "refused").

use aws_sdk_sts::operation::get_caller_identity::GetCallerIdentityError;
use aws_smithy_runtime_api::client::result::SdkError;

/// The caller's account and ARN.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    pub account: String,
    pub arn: Option<String>,
}

pub struct Sts {
    client: aws_sdk_sts::Client,
}

impl Sts {
    pub fn new(client: aws_sdk_sts::Client) -> Sts {
        Sts { client }
    }

    pub async fn caller_identity(
        &self,
    ) -> Result<Identity, SdkError<GetCallerIdentityError, aws_smithy_runtime_api::http::Response>> {
        let o = self.client.get_caller_identity().send().await?;
        Ok(Identity { account: o.account().unwrap_or_default().to_string(), arn: o.arn().map(str::to_string) })
    }
}
