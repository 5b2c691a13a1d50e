package awsemu

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// The instance metadata service (IMDSv2) as EC2 serves it at
// http://169.254.169.254: a session token from PUT /latest/api/token, then
// GET /latest/meta-data/... and /latest/dynamic/instance-identity/document
// with that token. The AWS SDKs take its address from
// AWS_EC2_METADATA_SERVICE_ENDPOINT; point that at the cloud's base URL.
// Tokens are required (HttpTokens=required), as on a hardened instance.
const (
	imdsTokenHeader    = "X-Aws-Ec2-Metadata-Token"
	imdsTokenTTLHeader = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"
	imdsMaxTokenTTL    = 21600
)

// SetMetadataInstance makes the metadata service describe the instance with
// id or name: the one its caller is taken to run on (a real metadata service
// knows its caller by the link-local hop; on loopback every caller is the
// same). Empty: no instance, and every metadata path answers 404.
func (aws *AWS) SetMetadataInstance(idOrName string) error {
	id := ""
	if idOrName != "" {
		in, ok := aws.cloud.Get(idOrName)
		if !ok {
			return fmt.Errorf("instance %q not found", idOrName)
		}
		id = in.ID
	}
	aws.mu.Lock()
	defer aws.mu.Unlock()
	aws.metadataInstance = id
	return nil
}

func (aws *AWS) imdsHandler(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/latest/api/token" {
		aws.imdsToken(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		imdsText(w, http.StatusMethodNotAllowed, "")
		return
	}
	if !aws.imdsTokenValid(r.Header.Get(imdsTokenHeader)) {
		imdsText(w, http.StatusUnauthorized, "")
		return
	}
	aws.mu.Lock()
	id := aws.metadataInstance
	aws.mu.Unlock()
	in, ok := aws.cloud.Get(id)
	var view ec2View
	if ok = ok && id != "" && in.State != simcloud.StateTerminated; ok {
		view = aws.ec2Of(in)
	}
	region := aws.region
	if !ok {
		imdsText(w, http.StatusNotFound, "")
		return
	}

	if r.URL.Path == "/latest/dynamic/instance-identity/document" {
		doc := map[string]any{
			"accountId":        ec2OwnerID,
			"architecture":     view.Architecture,
			"availabilityZone": view.Placement.AvailabilityZone,
			"instanceId":       view.InstanceID,
			"instanceType":     view.InstanceType,
			"privateIp":        view.PrivateIPAddress,
			"region":           region,
			"version":          "2017-09-30",
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(doc)
		return
	}
	rel, ok := strings.CutPrefix(r.URL.Path, "/latest/meta-data")
	if !ok {
		imdsText(w, http.StatusNotFound, "")
		return
	}
	tree := metadataTree(view, region)
	key := strings.Trim(rel, "/")
	if v, ok := tree[key]; ok && !strings.HasSuffix(rel, "/") {
		imdsText(w, http.StatusOK, v)
		return
	}
	// A directory: list its children, subdirectories with a trailing slash.
	prefix := key + "/"
	if key == "" {
		prefix = ""
	}
	children := map[string]bool{}
	for k := range tree {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			children[rest[:i+1]] = true
		} else {
			children[rest] = true
		}
	}
	if len(children) == 0 {
		imdsText(w, http.StatusNotFound, "")
		return
	}
	names := make([]string, 0, len(children))
	for n := range children {
		names = append(names, n)
	}
	sort.Strings(names)
	imdsText(w, http.StatusOK, strings.Join(names, "\n"))
}

// metadataTree is the instance's meta-data, by path under /latest/meta-data/.
func metadataTree(v ec2View, region string) map[string]string {
	t := map[string]string{
		"instance-id":                    v.InstanceID,
		"instance-type":                  v.InstanceType,
		"placement/availability-zone":    v.Placement.AvailabilityZone,
		"placement/availability-zone-id": v.Placement.AvailabilityZoneID,
		"placement/region":               region,
		"hostname":                       v.PrivateDNSName,
		"local-hostname":                 v.PrivateDNSName,
	}
	if v.PrivateIPAddress != "" {
		t["local-ipv4"] = v.PrivateIPAddress
	}
	if v.IPAddress != "" {
		t["public-ipv4"] = v.IPAddress
	}
	if v.DNSName != "" {
		t["public-hostname"] = v.DNSName
	}
	for _, eni := range v.NetworkInterfaces {
		t["mac"] = eni.MacAddress
		p := "network/interfaces/macs/" + eni.MacAddress + "/"
		t[p+"device-number"] = strconv.Itoa(eni.Attachment.DeviceIndex)
		t[p+"interface-id"] = eni.NetworkInterfaceID
		t[p+"mac"] = eni.MacAddress
		t[p+"owner-id"] = eni.OwnerID
		t[p+"subnet-id"] = eni.SubnetID
		t[p+"vpc-id"] = eni.VpcID
		t[p+"local-hostname"] = eni.PrivateDNSName
		var v4 []string
		for _, ip := range eni.PrivateIPAddresses {
			v4 = append(v4, ip.PrivateIPAddress)
		}
		if len(v4) > 0 {
			t[p+"local-ipv4s"] = strings.Join(v4, "\n")
		}
		var v6 []string
		for _, ip := range eni.IPv6Addresses {
			v6 = append(v6, ip.IPv6Address)
		}
		if len(v6) > 0 {
			t[p+"ipv6s"] = strings.Join(v6, "\n")
			t["ipv6"] = v6[0]
		}
		if eni.Association != nil {
			t[p+"public-ipv4s"] = eni.Association.PublicIP
		}
	}
	for k, val := range t {
		if val == "" {
			delete(t, k)
		}
	}
	return t
}

// imdsToken issues a session token for PUT /latest/api/token with a TTL of 1
// to 21600 seconds.
func (aws *AWS) imdsToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		imdsText(w, http.StatusMethodNotAllowed, "")
		return
	}
	// As EC2's: a request that went through a proxy is refused.
	if r.Header.Get("X-Forwarded-For") != "" {
		imdsText(w, http.StatusForbidden, "")
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(imdsTokenTTLHeader))
	if err != nil || ttl < 1 || ttl > imdsMaxTokenTTL {
		imdsText(w, http.StatusBadRequest, "")
		return
	}
	var b [33]byte
	_, _ = rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	now := time.Now()
	aws.mu.Lock()
	for t, exp := range aws.imdsTokens {
		if now.After(exp) {
			delete(aws.imdsTokens, t)
		}
	}
	aws.imdsTokens[tok] = now.Add(time.Duration(ttl) * time.Second)
	aws.mu.Unlock()
	w.Header().Set(imdsTokenTTLHeader, strconv.Itoa(ttl))
	imdsText(w, http.StatusOK, tok)
}

func (aws *AWS) imdsTokenValid(tok string) bool {
	if tok == "" {
		return false
	}
	aws.mu.Lock()
	defer aws.mu.Unlock()
	exp, ok := aws.imdsTokens[tok]
	return ok && time.Now().Before(exp)
}

func imdsText(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
