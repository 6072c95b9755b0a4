// GPU test of the campaign runner end to end: one compile, a small campaign per site on the
// decoupled baseline and on efta_correct, every trial classified, no silent corruption where the
// scheme covers the site.
#include <catch2/catch.hpp>

#include "ftattn/campaign.hpp"
#include "ftattn/runtime.hpp"

using namespace ftattn;

namespace {

struct Setup {
  KernelConfig config;
  Problem problem;
  std::unique_ptr<campaign::TrialBackend> backend;
  std::vector<float> clean, tolerance;
};

Setup make_setup(Runtime& rt, Protection protection, Mask mask) {
  Setup s;
  s.problem = Problem::bhsd(1, 2, 2, 256, 256, 64);
  KernelConfig c;
  c.head_dim = 64;
  c.protection = protection;
  c.mask = mask;
  c.fault_injection = true;
  s.config = rt.resolve(c, &s.problem);
  std::mt19937_64 rng(5);
  const Precision p = s.config.precision;
  const Problem& pr = s.problem;
  auto q = reference::random_tensor(rng, p, pr.q, 1, 2, 256, 64);
  auto k = reference::random_tensor(rng, p, pr.k, 1, 2, 256, 64);
  auto v = reference::random_tensor(rng, p, pr.v, 1, 2, 256, 64);
  s.backend = campaign::source_backend(rt, s.config, pr, q, k, v, OnFault::report);
  const FaultReport first = s.backend->run(std::nullopt, s.clean);
  REQUIRE(first.detected == 0);
  s.tolerance =
      campaign::element_tolerance(s.clean, campaign::reference_output(pr, p, mask, q, k, v), p);
  return s;
}

}  // namespace

TEST_CASE("a small campaign runs end to end and classifies every trial", "[gpu][campaign]") {
  Runtime rt;
  REQUIRE(rt.has_device());
  for (Protection protection : {Protection::decoupled, Protection::efta_correct})
    for (Mask mask : {Mask::none, Mask::causal}) {
      Setup s = make_setup(rt, protection, mask);
      for (FaultSite site :
           {FaultSite::scores, FaultSite::probs, FaultSite::row_sum, FaultSite::output}) {
        campaign::CampaignOptions o;
        o.site = site;
        o.trials = 200;
        o.bits = {20, 30};  // mantissa top and exponent: most flips matter
        o.seed = 9;
        const campaign::InjectionSpace space = campaign::injection_space(s.config, s.problem, site);
        const campaign::CampaignResult r =
            campaign::run_campaign(*s.backend, space, s.clean, s.tolerance, o);
        INFO(to_string(protection)
             << " " << to_string(mask) << " " << campaign::site_name(site) << "\n"
             << campaign::summary_table(r.tally));
        CHECK(r.tally.trials == 200);
        CHECK(r.trials.size() == 200u);
        CHECK(r.tally.count(campaign::Outcome::sdc) == 0);
        // Exponent flips cannot all be harmless: the checks must have fired.
        CHECK(r.tally.count(campaign::Outcome::corrected) +
                  r.tally.count(campaign::Outcome::detected) >
              0);
      }
    }
}
