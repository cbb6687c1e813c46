-- GET /version: the site generation's version (lib/state.lua).
local state = require "state"

return function(req, resp)
    resp:send(state.version)
end
