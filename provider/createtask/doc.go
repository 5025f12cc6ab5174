// Package createtask speaks the JSON "createTask" protocol of 2captcha
// (its API v2), Anti-Captcha, CapMonster Cloud and CapSolver, on both
// sides of captchaq:
//
//   - the translation at the door: ParseTask reads a createTask task object
//     into the queue's provider.Task (the in.php method and params), so a
//     task from either protocol goes through one validation and one
//     Backend; Solution turns an answer back into the solution object of
//     the type; FrontFault maps the queue's in.php codes to the protocol's
//     errorId/errorCode. captchaq's HTTP front (server) and its simulator
//     (sim) both translate through here, so they cannot drift apart.
//   - a Client for services that speak only this protocol: it implements
//     captchaq.Provider (Submit by createTask, PollMany by getTaskResult,
//     one request per id: the protocol has no bulk form), Balance by
//     getBalance and reports by the report methods, with each of the
//     protocol's error codes mapped to the in.php code of the same meaning
//     and so to the queue's classes (provider.Classify). Submit sends the
//     queue's pingback URL as callbackUrl, and ReadCallback reads what the
//     service POSTs there (getTaskResult's JSON with the taskId); PollGap
//     is the service's published rule for polling one task
//     (PublishedPollGap: 2 s, 5 s at 2captcha, 3 s at CapSolver), which
//     the queue keeps.
//
// Wire forms, as the services document them and their official clients
// send them:
//
//	POST /createTask    {"clientKey","task":{"type",…},"callbackUrl"?} → {"errorId":0,"taskId":7654321}
//	POST /getTaskResult {"clientKey","taskId"} → {"errorId":0,"status":"processing"}
//	                                            {"errorId":0,"status":"ready","solution":{…},…}
//	POST /getBalance    {"clientKey"} → {"errorId":0,"balance":12.5}
//	POST /reportIncorrect… /reportCorrect… {"clientKey","taskId"} → {"errorId":0,"status":"success"}
//	errors: HTTP 200 {"errorId":N,"errorCode":"ERROR_…","errorDescription":"…"}
//
// Type names are matched in any letter case (CapSolver writes
// "ReCaptchaV2TaskProxyless"), and so are the task's field names; a field
// given twice in two letter cases is refused. Fields a type does not take
// are ignored, as the services ignore them, except proxy fields on a
// Proxyless type, which are refused (the proxy would silently go unused),
// and in.php's own names in any spelling (provider.IsReservedParam).
// The table of types, fields and codes is docs/protocols.md.
package createtask
