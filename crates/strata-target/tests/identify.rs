//! Identify and Get Features as hosts probe them at attach, checked against
//! what Linux nvmet (`drivers/nvme/target/admin-cmd.c`) and SPDK's target
//! (`lib/nvmf/ctrlr.c`) answer: nothing reported that the target does not
//! know.

mod common;

use common::{NQN, start};
use strata_host::{Controller, HostConfig};
use strata_nvme::command::feature;
use strata_nvme::identify::PowerStateDescriptor;
use strata_nvme::status::Status;

/// Identify Controller used to claim a 25 W power state 0 with made-up
/// entry and exit latencies, and warning / critical temperature thresholds
/// of 70 C and 100 C, and Get Features answered a temperature threshold.
/// There is no power or thermal management behind a fabrics controller:
/// SPDK's target leaves PSD0 zero, nvmet leaves WCTEMP and CCTEMP zero
/// ("not reported") and refuses the Temperature Threshold feature with
/// Invalid Field (its `nvmet_execute_get_features` compiles that case out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_controller_reports_no_power_or_thermal_figures() {
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let c = ctrl.identify_controller().await.unwrap();
    assert_eq!(c.npss, 0, "one power state");
    assert_eq!(c.psd0, PowerStateDescriptor::default());
    assert_eq!((c.wctemp, c.cctemp), (0, 0));
    let err = ctrl.get_features(feature::TEMPERATURE_THRESHOLD, 0).await.unwrap_err();
    assert!(err.is_status(Status::INVALID_FIELD), "{err}");
    ctrl.disconnect().await.unwrap();
}
