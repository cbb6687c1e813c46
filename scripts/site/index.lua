-- / : what this site shows. Every file here is a route (hello.lua answers
-- /hello) except lib/ and files named _*.lua: modules that routes require
-- (lib/query.lua is require "query"). Edit any of them while the server
-- runs: the next request uses the new code.
return function(req, resp)
    resp:send([[
moonflow is serving scripts/site:

  /hello           plain text
  /json            a JSON answer built from the request
  /fanout          two HTTP calls in parallel (mf.parallel), then one answer
  /sleep?ms=200    mf.sleep without blocking the worker
]])
end
