-- Loaded once per worker and site generation: tag tells them apart (a
-- number from the shared dict itself, so no two are alike), version which
-- generation of the site answered.
local mf = require "moonflow"

return { version = "v1", tag = tostring(mf.shared.hits:incr("tags", 1, 0)) }
