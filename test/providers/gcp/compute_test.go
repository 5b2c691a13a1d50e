package gcp_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// compute is a loopback stand-in for the three Google endpoints the GCE
// provider reaches, enough for its node and external load balancer code:
// the metadata server (GCE_METADATA_HOST), the token URL of its
// cloud-config, and the Compute Engine REST API (its api-endpoint), served
// as a store of resources by path. Every version (v1, beta, alpha) shares
// the store; an insert, update, verb or delete is an operation that is DONE
// at once; a forwarding rule or an address inserted without an IP gets
// one, and what else the API defaults (an external scheme, premium tier).
type compute struct {
	url string

	mu      sync.Mutex
	objects map[string]map[string]any // "projects/p/regions/r/targetPools/name" -> the resource
	calls   map[string]int            // "POST targetPools/addInstance" -> count
	ops     int
	nextIP  int
}

// startCompute serves the stand-in on loopback until the test ends.
func startCompute(t *testing.T) *compute {
	t.Helper()
	c := &compute{objects: map[string]map[string]any{}, calls: map[string]int{}, nextIP: 10}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

// addInstance stores a running VM as Compute Engine describes one.
func (c *compute) addInstance(project, zone, name, machineType, internalIP, externalIP string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	path := fmt.Sprintf("projects/%s/zones/%s/instances/%s", project, zone, name)
	c.objects[path] = map[string]any{
		"kind": "compute#instance", "name": name, "id": fmt.Sprint(1000 + len(c.objects)), "status": "RUNNING",
		"zone":        c.url + "/compute/v1/projects/" + project + "/zones/" + zone,
		"machineType": c.url + "/compute/v1/projects/" + project + "/zones/" + zone + "/machineTypes/" + machineType,
		"selfLink":    c.url + "/compute/v1/" + path,
		"networkInterfaces": []any{map[string]any{
			"networkIP":     internalIP,
			"accessConfigs": []any{map[string]any{"type": "ONE_TO_ONE_NAT", "natIP": externalIP}},
		}},
	}
}

// removeInstance deletes a VM, as its owner would in the console.
func (c *compute) removeInstance(project, zone, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.objects, fmt.Sprintf("projects/%s/zones/%s/instances/%s", project, zone, name))
}

// get returns a copy of the resource at path ("projects/p/regions/r/...").
func (c *compute) get(path string) (map[string]any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.objects[path]
	if !ok {
		return nil, false
	}
	var cp map[string]any
	b, _ := json.Marshal(o)
	_ = json.Unmarshal(b, &cp)
	return cp, true
}

// count is how many requests of a kind ("POST forwardingRules") came.
func (c *compute) count(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[kind]
}

func (c *compute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/computeMetadata/v1/"):
		c.metadata(w, r)
	case r.URL.Path == "/token":
		writeJSON(w, http.StatusOK, map[string]any{"accessToken": "loopback-token", "expireTime": "2099-01-01T00:00:00Z"})
	case strings.HasPrefix(r.URL.Path, "/compute/"):
		c.api(w, r)
	default:
		http.NotFound(w, r)
	}
}

// metadata answers as the metadata server of a VM named gcp-ccm, which no
// node is: the provider then looks every node up in the API.
func (c *compute) metadata(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Metadata-Flavor", "Google")
	switch strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/") {
	case "instance/hostname":
		_, _ = io.WriteString(w, "gcp-ccm.c."+project+".internal")
	case "instance/zone":
		_, _ = io.WriteString(w, "projects/1234/zones/"+zone)
	case "project/project-id":
		_, _ = io.WriteString(w, project)
	case "instance/service-accounts/default/token":
		writeJSON(w, http.StatusOK, map[string]any{"access_token": "loopback-token", "expires_in": 3600, "token_type": "Bearer"})
	default:
		http.NotFound(w, r)
	}
}

// api serves /compute/<version>/projects/...: GET a resource or a
// collection, POST to a collection (insert) or to a resource's verb
// (addInstance, setTarget, ...), PUT and PATCH a resource, DELETE it, and
// operations' wait and get, always DONE.
func (c *compute) api(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/compute/")
	_, path, ok := strings.Cut(rest, "/") // drop the version
	if !ok || !strings.HasPrefix(path, "projects/") {
		apiError(w, http.StatusNotFound, "no such path")
		return
	}
	parts := strings.Split(path, "/")
	collection, at := collectionOf(parts)
	verb := ""
	if len(parts) > at+2 {
		verb = parts[at+2]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kind := r.Method + " " + collection
	if verb != "" {
		kind += "/" + verb
	}
	c.calls[kind]++

	if collection == "operations" {
		writeJSON(w, http.StatusOK, map[string]any{"kind": "compute#operation", "status": "DONE",
			"selfLink": c.url + "/compute/v1/" + strings.TrimSuffix(path, "/wait")})
		return
	}
	var body map[string]any
	if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil && err != io.EOF {
			apiError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	isCollection := len(parts) == at+1
	switch {
	case r.Method == http.MethodGet && isCollection:
		var items []any
		for k, o := range c.objects {
			if strings.HasPrefix(k, path+"/") && !strings.Contains(strings.TrimPrefix(k, path+"/"), "/") {
				items = append(items, o)
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"items": items})
	case r.Method == http.MethodGet:
		o, ok := c.objects[path]
		if !ok {
			apiError(w, http.StatusNotFound, "The resource '"+path+"' was not found")
			return
		}
		writeJSON(w, http.StatusOK, o)
	case r.Method == http.MethodPost && isCollection:
		name, _ := body["name"].(string)
		key := path + "/" + name
		if _, exists := c.objects[key]; exists {
			apiError(w, http.StatusConflict, "The resource '"+key+"' already exists")
			return
		}
		body["selfLink"] = c.url + "/compute/v1/" + key
		body["id"] = fmt.Sprint(5000 + len(c.objects))
		// What Compute Engine fills in when the request leaves it out.
		switch collection {
		case "forwardingRules":
			defaults(body, map[string]any{"IPAddress": c.allocate(), "loadBalancingScheme": "EXTERNAL", "networkTier": "PREMIUM"})
		case "addresses":
			defaults(body, map[string]any{"address": c.allocate(), "addressType": "EXTERNAL", "networkTier": "PREMIUM"})
			body["status"] = "RESERVED"
		}
		c.objects[key] = body
		c.operation(w, parts)
	case r.Method == http.MethodPost: // a verb on a resource
		key := strings.Join(parts[:len(parts)-1], "/")
		o, ok := c.objects[key]
		if !ok {
			apiError(w, http.StatusNotFound, "The resource '"+key+"' was not found")
			return
		}
		switch verb {
		case "addInstance":
			for _, ref := range listOf(body["instances"]) {
				if u, ok := ref.(map[string]any)["instance"].(string); ok {
					o["instances"] = append(listOf(o["instances"]), u)
				}
			}
		case "removeInstance":
			var keep []any
			for _, have := range listOf(o["instances"]) {
				if !slices.ContainsFunc(listOf(body["instances"]), func(ref any) bool { return ref.(map[string]any)["instance"] == have }) {
					keep = append(keep, have)
				}
			}
			o["instances"] = keep
		case "setTarget":
			o["target"] = body["target"]
		}
		c.operation(w, parts)
	case r.Method == http.MethodPut || r.Method == http.MethodPatch:
		o, ok := c.objects[path]
		if !ok {
			apiError(w, http.StatusNotFound, "The resource '"+path+"' was not found")
			return
		}
		if r.Method == http.MethodPut {
			body["selfLink"], body["id"] = o["selfLink"], o["id"]
			c.objects[path] = body
		} else {
			for k, v := range body {
				o[k] = v
			}
		}
		c.operation(w, parts)
	case r.Method == http.MethodDelete:
		if _, ok := c.objects[path]; !ok {
			apiError(w, http.StatusNotFound, "The resource '"+path+"' was not found")
			return
		}
		delete(c.objects, path)
		c.operation(w, parts)
	default:
		apiError(w, http.StatusBadRequest, "unsupported "+r.Method)
	}
}

// operation answers a change with a DONE operation in the scope of the
// resource (zonal, regional or global), whose selfLink the client waits on.
func (c *compute) operation(w http.ResponseWriter, parts []string) {
	c.ops++
	scope := "global"
	if len(parts) > 3 && (parts[2] == "regions" || parts[2] == "zones") {
		scope = parts[2] + "/" + parts[3]
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "compute#operation", "name": fmt.Sprintf("op-%d", c.ops), "status": "DONE",
		"selfLink": fmt.Sprintf("%s/compute/v1/projects/%s/%s/operations/op-%d", c.url, parts[1], scope, c.ops)})
}

// allocate hands out the next external address (never contacted).
func (c *compute) allocate() string {
	c.nextIP++
	return fmt.Sprintf("198.18.200.%d", c.nextIP)
}

// collectionOf names the collection of a path and its index:
// projects/p/regions/r/targetPools/tp/addInstance is targetPools, 4;
// projects/p/global/firewalls/fw is firewalls, 3.
func collectionOf(parts []string) (string, int) {
	i := 2
	if len(parts) > 3 && (parts[2] == "regions" || parts[2] == "zones") {
		i = 4
	} else if len(parts) > 2 && parts[2] == "global" {
		i = 3
	}
	if i >= len(parts) {
		return "", len(parts)
	}
	return parts[i], i
}

// defaults sets each field of d that o lacks or has empty.
func defaults(o, d map[string]any) {
	for k, v := range d {
		if o[k] == nil || o[k] == "" {
			o[k] = v
		}
	}
}

func listOf(v any) []any {
	l, _ := v.([]any)
	return l
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"code": code, "message": msg,
		"errors": []any{map[string]any{"message": msg, "reason": http.StatusText(code)}}}})
}
