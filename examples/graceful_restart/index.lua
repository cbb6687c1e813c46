-- A site to restart gracefully: this file answers `/` with the version of
-- the site the answering server runs ($SITE_VERSION, "1" when unset).
--
--   SITE_VERSION=1 moonflow serve examples/graceful_restart --listen 127.0.0.1:8888 &
--   SITE_VERSION=2 moonflow serve examples/graceful_restart --listen 127.0.0.1:8888 --takeover &
--
-- The second server takes the listening socket over from the first: no
-- connection is refused or reset in between; the first answers what it
-- already accepted, then exits 0. Clients see "version 1", then
-- "version 2", and no error: while both run, both accept on the one
-- socket, so the two versions may alternate until the first exits.
local version = os.getenv("SITE_VERSION") or "1"

return function(_, resp)
    resp:send("version " .. version .. "\n")
end
