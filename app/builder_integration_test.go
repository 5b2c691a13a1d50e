//go:build integration

package app_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestBuilderWebhooks: a command built with CommandBuilder runs
// Outrigger's controllers and serves the provider's webhook on the webhook
// port, as upstream's (KEP-2699, behind CloudControllerManagerWebhook):
// an AdmissionReview gets the provider handler's answer with the
// request's UID.
func TestBuilderWebhooks(t *testing.T) {
	b := app.NewBuilder()
	b.RegisterDefaultControllers()
	b.RegisterWebhook("no-foo", app.WebhookConfig{
		Path: "/validate-no-foo",
		AdmissionHandler: func(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
			if req.Name == "foo" {
				return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: "no foo here"}}, nil
			}
			return &admissionv1.AdmissionResponse{Allowed: true}, nil
		},
	})
	b.SetCloudInitializer(func(*config.CompletedConfig) cloudprovider.Interface { return fakeCloud() })
	stop := make(chan struct{})
	b.SetStopChannel(stop)
	b.SetCmdName("webhook-ccm")
	cmd := b.BuildCommand()
	if cmd.Use != "webhook-ccm" {
		t.Errorf("the command's name is %q", cmd.Use)
	}
	port := testenv.FreePort(t)
	ended := startCommand(t, cmd, stop, "--cloud-provider=fake", "--feature-gates=CloudControllerManagerWebhook=true",
		"--webhooks=no-foo", fmt.Sprintf("--webhook-secure-port=%d", port), "--webhook-bind-address=127.0.0.1",
		"--webhook-cert-dir="+t.TempDir())
	waitInitialized(t, ended)

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the port's self-signed certificate
	review := func(name string, uid types.UID) (*admissionv1.AdmissionResponse, error) {
		body, err := json.Marshal(&admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: uid, Name: name, Namespace: "default", Operation: admissionv1.Create,
				Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
		})
		if err != nil {
			return nil, err
		}
		resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d/validate-no-foo", port), "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("status %d", resp.StatusCode)
		}
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return nil, err
		}
		return out.Response, nil
	}
	var denied *admissionv1.AdmissionResponse
	testenv.Eventually(t, 30*time.Second, "the webhook answering", func() (bool, error) {
		r, err := review("foo", "uid-1")
		denied = r
		return err == nil, err
	})
	if denied == nil || denied.Allowed || denied.UID != "uid-1" || denied.Result == nil || denied.Result.Message != "no foo here" {
		t.Errorf("review of foo: %+v, want denied with uid-1 and the handler's message", denied)
	}
	if r, err := review("bar", "uid-2"); err != nil || !r.Allowed || r.UID != "uid-2" {
		t.Errorf("review of bar: %+v, %v, want allowed with uid-2", r, err)
	}
}
