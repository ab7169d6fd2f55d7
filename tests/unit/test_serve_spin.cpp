// serve/spin_wait.h: the spin before a blocking wait is bounded, starts only after work and where
// the gate lets it, and backs off after spins that found nothing. No assertion on how fast.
#include <gtest/gtest.h>

#include "serve/spin_wait.h"

namespace ferry::serve {
namespace {

bool open_gate() { return true; }
bool closed_gate() { return false; }

// Spins until again() says block; the number of polls it allowed.
int64_t spin_out(SpinWait& s) {
  int64_t polls = 0;
  while (s.again()) ++polls;
  return polls;
}

TEST(ServeSpin, NoBudgetNeverSpins) {
  SpinWait s(0, open_gate);
  s.arm();
  EXPECT_FALSE(s.again());
  EXPECT_EQ(s.misses(), 0u);
}

TEST(ServeSpin, NoSpinBeforeWork) {
  SpinWait s(100000, open_gate);
  EXPECT_FALSE(s.again());
}

TEST(ServeSpin, ClosedGateNeverSpins) {  // the machine's cores are busy
  SpinWait s(100000, closed_gate);
  s.arm();
  EXPECT_FALSE(s.again());
  EXPECT_EQ(s.misses(), 0u);
}

TEST(ServeSpin, ASpinEndsAndCountsAMiss) {
  SpinWait s(2000, open_gate);
  s.arm();
  spin_out(s);  // ends at the budget, or earlier when this thread was preempted
  EXPECT_FALSE(s.again());
  EXPECT_EQ(s.misses(), 1u);
  EXPECT_EQ(s.hits(), 0u);
}

TEST(ServeSpin, WorkWhileSpinningIsAHit) {
  SpinWait s(1000000, open_gate);
  s.arm();
  s.arm();  // work found before the spin ended
  EXPECT_EQ(s.hits(), 1u);
  EXPECT_EQ(s.misses(), 0u);
}

TEST(ServeSpin, BacksOffAfterMissesInARowAndProbes) {
  SpinWait s(1, open_gate);
  for (int i = 0; i < SpinWait::kMaxMisses; ++i) {
    s.arm();
    EXPECT_TRUE(s.spinning());
    spin_out(s);
  }
  EXPECT_EQ(s.misses(), uint64_t(SpinWait::kMaxMisses));
  // Now only one arm in kProbeEvery starts a spin.
  int spins = 0;
  for (unsigned i = 0; i < SpinWait::kProbeEvery * 2; ++i) {
    s.arm();
    if (s.spinning()) ++spins;
    spin_out(s);
  }
  EXPECT_EQ(spins, 2);
}

TEST(ServeSpin, AHitEndsTheBackOff) {
  SpinWait s(1000, open_gate);
  for (int i = 0; i < SpinWait::kMaxMisses; ++i) {
    s.arm();
    spin_out(s);
  }
  unsigned arms = 0;
  do {
    s.arm();
    ++arms;
  } while (!s.spinning() && arms < 100);
  EXPECT_EQ(arms, SpinWait::kProbeEvery);
  s.arm();  // work found during the probe
  EXPECT_EQ(s.hits(), 1u);
  spin_out(s);  // one miss: no back-off yet
  s.arm();
  EXPECT_TRUE(s.spinning());
}

}  // namespace
}  // namespace ferry::serve
