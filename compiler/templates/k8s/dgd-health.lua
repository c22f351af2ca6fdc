-- Argo CD health of a DynamoGraphDeployment (nvidia.com): Argo CD has no built-in check for it.
-- The operator reports status.state (initializing, pending, successful, failed) and a Ready
-- condition (ai-dynamo/dynamo deploy/operator/api/v1beta1); a status older than the spec is
-- still progressing.
hs = {status = "Progressing", message = "waiting for the Dynamo operator"}
if obj.status == nil then
  return hs
end
if obj.status.observedGeneration ~= nil and obj.metadata.generation ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  hs.message = "the operator has not observed the latest spec"
  return hs
end
local ready = nil
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Ready" then
      ready = c
    end
  end
end
if obj.status.state == "failed" then
  hs.status = "Degraded"
  hs.message = (ready ~= nil and ready.message) or "state failed"
  return hs
end
if obj.status.state == "successful" and ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or "ready"
  return hs
end
if ready ~= nil and ready.message ~= nil then
  hs.message = ready.message
end
return hs
