#include <moonflow/error.h>

#include "test.h"

TEST(system_codes_are_negated_errno)
{
    ASSERT_EQ(MF_ETIMEDOUT, -ETIMEDOUT);
    ASSERT_EQ(mf_err_from_errno(ECONNREFUSED), MF_ECONNREFUSED);
    ASSERT_STR_EQ(mf_err_name(MF_ECONNREFUSED), "ECONNREFUSED");
    ASSERT_STR_EQ(mf_strerror(MF_ETIMEDOUT), "timed out");
}

TEST(engine_codes_have_names_and_messages)
{
    ASSERT_STR_EQ(mf_err_name(MF_ENOPOOL), "ENOPOOL");
    ASSERT_STR_EQ(mf_err_name(MF_EPROTO), "EPROTO");
    ASSERT_STR_EQ(mf_strerror(MF_ECLOSED), "closed");
    ASSERT_STR_EQ(mf_err_name(12345), "UNKNOWN");
    ASSERT_STR_EQ(mf_strerror(0), "success");
}

TEST(state_names_are_stable_lowercase)
{
    ASSERT_STR_EQ(mf_state_name(MF_STATE_SUCCESS), "success");
    ASSERT_STR_EQ(mf_state_name(MF_STATE_TIMEOUT), "timeout");
    ASSERT_STR_EQ(mf_state_name(MF_STATE_CANCELED), "canceled");
    ASSERT_STR_EQ(mf_state_name(MF_STATE_DNS_ERROR), "dns error");
    ASSERT_STR_EQ(mf_state_name(99), "unknown");
}
